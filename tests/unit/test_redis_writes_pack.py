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


@pytest.mark.parametrize(("replicas", "timeout_ms"), [(1, 500), (2, 1), (12, 60_000)])
def test_the_replica_wait_is_the_wait_command_redis_py_would_send(
    replicas: int, timeout_ms: int
) -> None:
    from store.redis_writes import ReplicaAck

    expected = b"".join(Connection().pack_command("WAIT", replicas, timeout_ms))
    assert ReplicaAck(replicas, timeout_ms).pack() == expected


@pytest.mark.parametrize(("replicas", "timeout_ms"), [(0, 500), (1, 0), (-1, 10)])
def test_a_replica_wait_that_would_never_wait_is_refused(replicas: int, timeout_ms: int) -> None:
    """0 replicas means "no WAIT" (the setting's default builds no ReplicaAck), and WAIT with
    timeout 0 blocks forever: both are configuration mistakes here."""
    from store.redis_writes import ReplicaAck

    with pytest.raises(ValueError, match="ReplicaAck needs"):
        ReplicaAck(replicas, timeout_ms)


def test_a_replica_shortfall_is_retried_like_an_unreachable_store() -> None:
    """Not a refusal: the write is retried in place (``write_with_retry`` retries
    ``StoreUnavailable`` but not ``StoreRefused``)."""
    from store.errors import ReplicaShortfall, StoreRefused, StoreUnavailable

    assert issubclass(ReplicaShortfall, StoreUnavailable)
    assert not issubclass(ReplicaShortfall, StoreRefused)
