"""Faust table values <-> engine state. Tables serialise to JSON, whose object keys are strings,
so maps with integer keys are stored as lists of pairs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from streams.engine.steps.verify import VERIFIED_REQUESTS_KEPT, LedgerState
from streams.live.agents.context import as_current

V = TypeVar("V")


def ledger_from_table(value: Any) -> LedgerState:
    """The user's ledger (old list-only values, pairs without request ids, are still read)."""
    if isinstance(value, dict):
        pairs, requests = value.get("pairs", []), value.get("requests", [])
    else:
        pairs, requests = value or [], []
    return LedgerState({int(i): int(t) for i, t in pairs}, [str(r) for r in requests])


def ledger_to_table(ledger: LedgerState) -> dict[str, Any]:
    return {
        "pairs": [[i, t] for i, t in ledger.pairs.items()],
        "requests": ledger.requests[-VERIFIED_REQUESTS_KEPT:],
    }


def history_from_table(value: Any) -> list[tuple[int, int, int]]:
    return [(int(i), int(lab), int(t)) for i, lab, t in (value or [])]


def history_to_table(entries: list[tuple[int, int, int]]) -> list[list[int]]:
    return [list(e) for e in entries]


class BatchState(Generic[V]):
    """One table's per-user values for the length of one agent batch.

    Each user's value is read and decoded once (at its first event, inside that event's
    ``as_current``), and written back once at :meth:`save`, in the partition of the last event
    that changed it. Per-event reads and writes cost a JSON round trip, a RocksDB access and a
    changelog message each; a batch of 256 events holds many events of the same user.
    """

    def __init__(
        self, table: Any, load: Callable[[Any], V], dump: Callable[[V], Any] | None = None
    ) -> None:
        self.table, self.load, self.dump = table, load, dump
        self.values: dict[int, V] = {}
        self.changed: dict[int, Any] = {}  #: user -> the last event that changed its value

    def get(self, user: int) -> V:
        """The user's value: call inside the current event's ``as_current`` (its partition)."""
        try:
            return self.values[user]
        except KeyError:
            value = self.values[user] = self.load(self.table.get(user))
            return value

    def put(self, user: int, value: V, event: Any) -> None:
        """Replace the user's value (``event`` changed it); only for a table with ``dump``."""
        assert self.dump is not None, "a read-only batch state"
        self.values[user] = value
        self.changed[user] = event

    def save(self) -> None:
        """Write every changed value, each in its last event's partition."""
        dump = self.dump
        for user, event in self.changed.items():
            assert dump is not None
            with as_current(event):
                self.table[user] = dump(self.values[user])
        self.changed.clear()
