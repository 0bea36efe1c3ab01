"""Faust table partitions get bounded RocksDB buffers, not Faust's defaults (issue 24 item 5).

``solaris bench memory`` measured the pipeline worker's resident set growing by 1.6 KB per
event over a whole 2-hour replay with Faust's defaults (64 MiB write buffers x 3 and a 2 GiB
block cache per table partition, 16 partitions per worker here); these tests check the options
that bound it reach the RocksDB store Faust opens.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store.memory import InMemoryStore
from streams.engine.models import EngineModels
from streams.live.app import ROLES, create_app, table_options
from streams.live.components import Components
from streams.settings import Settings
from tests.fakes import FakeFM

MIB = 2**20


def test_options_follow_the_settings_and_are_a_new_dict_each_time() -> None:
    s = Settings(table_write_buffer_mib=3, table_block_cache_mib=5)
    first, second = table_options(s, "rocksdb://"), table_options(s, "rocksdb://")
    assert first == second and first is not second  # Faust pops keys from the dict it gets
    assert first is not None
    assert first["write_buffer_size"] == 3 * MIB and first["max_write_buffer_number"] == 2
    assert first["block_cache_size"] == 5 * MIB
    assert table_options(s, "memory://") is None


@pytest.fixture()
def rocks_app(tmp_path: Path) -> Iterator[Any]:
    import asyncio

    from tests.unit.test_agents import close_current_loop, close_test_loops

    close_current_loop()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    settings = Settings(state_dir=tmp_path / "state", table_write_buffer_mib=3)
    parts = Components(settings, EngineModels(FakeFM(4)), InMemoryStore())
    app = create_app(settings, list(ROLES), parts, store="rocksdb://")
    try:
        yield app
    finally:
        close_test_loops(loop, app)


def test_every_table_store_opens_rocksdb_with_the_bounded_options(rocks_app: Any) -> None:
    assert rocks_app.tables
    for table in rocks_app.tables.values():
        opts = table.data.rocksdb_options
        assert opts.write_buffer_size == 3 * MIB, table.name
        assert opts.max_write_buffer_number == 2
        assert opts.block_cache_size == 1 * MIB  # the default of table_block_cache_mib
