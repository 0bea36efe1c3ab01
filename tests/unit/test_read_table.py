"""``streams.live.state.read_table``: what ``table.get`` gives, with one store lookup."""

from __future__ import annotations

from typing import Any

import pytest

from streams.live.state import read_table
from tests.unit.test_agents import run


class CountingStore(dict[Any, Any]):
    """A store that counts its lookups (``in`` and reads)."""

    lookups = 0

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        self.lookups += 1
        return super().__getitem__(key)


def test_a_faust_table_reads_the_same_with_one_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the workers' own tables (``default=None``): present and absent keys read as
    ``table.get`` reads them, Faust's read hook runs, and the store is asked once, not twice."""

    async def body(app: Any, parts: Any, sent: Any) -> None:
        table = app.tables["ledger"]
        store = CountingStore({7: {"pairs": [[1, 2]]}})
        monkeypatch.setattr(type(table), "data", property(lambda _: store))
        hooked: list[int] = []
        real_hook = table.on_key_get
        monkeypatch.setattr(table, "on_key_get", lambda k: (hooked.append(k), real_hook(k)))
        assert read_table(table, 7) == table.get(7) == {"pairs": [[1, 2]]}
        assert read_table(table, 8) is None and table.get(8) is None
        store.lookups = 0
        read_table(table, 7)
        read_table(table, 8)
        assert store.lookups == 2  # one per key
        store.lookups = 0
        table.get(7)
        assert store.lookups == 2  # Faust's get: ``in``, then the value
        assert hooked == [7, 7, 8, 8, 7, 8, 7]

    run(body, monkeypatch)
