"""The hand-packed ``SET … PX`` batch is byte for byte what redis-py would send."""

from __future__ import annotations

import pytest
from redis.connection import Connection

from store.redis_writes import pack_set_px


@pytest.mark.parametrize("ttl_ms", [1, 60_000, 14_400_000])
def test_packed_sets_equal_redis_py_commands(ttl_ms: int) -> None:
    items = [(b"sol:{u1}:p:22", b"\x00\r\n" * 40), (b"k", b""), (b"sol:{u333}:agg", bytes(7000))]
    conn = Connection()  # only its packer is used: nothing connects
    expected = b"".join(b"".join(conn.pack_command("SET", k, v, "PX", ttl_ms)) for k, v in items)
    assert pack_set_px(items, ttl_ms) == expected


def test_no_items_pack_to_nothing() -> None:
    assert pack_set_px([], 1000) == b""
