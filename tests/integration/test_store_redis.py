"""The FeatureStore contract on a real Redis, plus Redis-specific guarantees."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from store.errors import StoreError, StoreUnavailable
from store.keys import KeyLayout, PairGrid
from store.protocol import ReadBatch
from store.redis_store import RedisStore
from store.values import decode_vector, encode_pairs
from tests.contract.store_contract import StoreContract, pair

pytestmark = pytest.mark.integration


@pytest.fixture()
def store(redis_url: str, unique: str) -> Iterator[RedisStore]:
    s = RedisStore(redis_url, KeyLayout(f"t{unique}"))
    yield s
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"t{unique}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
    s.close()


@pytest.fixture()
def advance() -> Callable[[int], None]:
    return lambda ms: time.sleep(ms / 1000)


class TestRedisStore(StoreContract):
    def test_keys_of_a_user_share_one_cluster_slot(self, store: RedisStore, redis_url: str) -> None:
        from redis.crc import key_slot

        keys = store.keys_for(
            ReadBatch(pairs=[(42, i) for i in range(50)], aggregates=[42], neighbours=[42])
        )
        assert len({key_slot(k) for k in keys}) == 1

    def test_read_of_500_candidates_is_one_round_trip(
        self, store: RedisStore, redis_url: str
    ) -> None:
        client = redis.Redis.from_url(redis_url)
        before = client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)
        store.read(
            ReadBatch(pairs=[(1, i) for i in range(500)], aggregates=[1], neighbours=[1]), 500
        )
        after = client.info("commandstats")["cmdstat_mget"]["calls"]
        client.close()
        assert after - before == 1
        assert store.round_trips == 1

    def test_pair_grid_read_equals_the_tuple_read(self, store: RedisStore) -> None:
        users, items = [5, 66, 777], [1, 22, 333, 4_444, 55_555, 7]  # ids of mixed lengths
        store.write_pairs([pair(u, i) for u in users for i in items[::2]], ttl_ms=60_000)
        grid = store.read(ReadBatch(pairs=PairGrid(users, items), aggregates=users), 2_000)
        tuples = [(u, i) for u in users for i in items]
        want = store.read(ReadBatch(pairs=tuples, aggregates=users), 2_000)
        assert grid == want and store.round_trips == 2
        assert [v is not None for v in grid.pairs] == [j % 2 == 0 for _ in users for j in range(6)]

    def test_physical_ttl_is_set(self, store: RedisStore, redis_url: str) -> None:
        store.write_pairs([pair(3, 30)], ttl_ms=60_000)
        client = redis.Redis.from_url(redis_url)
        ttl = client.pttl(store.layout.pair(3, 30))
        client.close()
        assert 0 < ttl <= 60_000

    def test_a_batch_of_error_replies_leaves_the_connection_in_step(
        self, store: RedisStore
    ) -> None:
        """The packed write reads every reply, also after an error reply: a write that stopped
        at the first error would leave the rest unread and the next write would read them."""
        bad = [pair(4, i) for i in range(20)]
        with pytest.raises(StoreUnavailable, match="invalid expire time"):
            store.write_pairs(bad, ttl_ms=0)  # Redis refuses PX 0: 20 error replies
        good = [pair(4, i, seed=i) for i in range(20)]
        store.write_pairs(good, ttl_ms=60_000)
        got = store.read(ReadBatch(pairs=[(4, i) for i in range(20)]), 500).pairs
        assert got == encode_pairs(good)

    def test_unreachable_redis_raises_store_error_quickly(self) -> None:
        dead = RedisStore("redis://127.0.0.1:1/0")
        t0 = time.perf_counter()
        # a refused connection, not the deadline: 50 ms could pass on a loaded machine (make
        # test's parallel part) before the connect was even tried, a timeout, not this error
        with pytest.raises(StoreUnavailable):
            dead.read(ReadBatch(pairs=[(1, 1)]), timeout_ms=1000)
        assert time.perf_counter() - t0 < 2.0
        with pytest.raises(StoreError):
            dead.write_pairs([pair(1, 1)], 1000)
        dead.close()


def test_conditional_writes_survive_a_script_flush(store: RedisStore, redis_url: str) -> None:
    """The compare-and-set script is loaded again when Redis lost it (a restart, SCRIPT FLUSH):
    the batch is sent again and nothing is lost or double-counted."""
    client = redis.Redis.from_url(redis_url)
    try:
        store.write_pairs([pair(8, 80, t=1_700_000_005_000, seed=1)], ttl_ms=3_600_000)
        client.script_flush()
        store.write_pairs(
            [pair(8, 80, t=1_700_000_000_000, seed=2), pair(8, 81, seed=3)], ttl_ms=3_600_000
        )
        res = store.read(ReadBatch(pairs=[(8, 80), (8, 81)]), 500)
        assert res.pairs[0] is not None and res.pairs[1] is not None
        assert decode_vector(res.pairs[0]).event_time_ms == 1_700_000_005_000
        assert store.stale_skipped == 1
    finally:
        client.close()


def test_a_write_no_replica_confirms_is_applied_but_not_acknowledged(
    redis_url: str, unique: str, store: RedisStore
) -> None:
    """``SOLARIS_REDIS_WAIT_REPLICAS`` on a Redis without replicas: every write (conditional
    pairs, plain neighbour lists) raises :class:`ReplicaShortfall` after the wait, so the
    writer retries it instead of counting it stored; the master applied it (a retry is
    idempotent) and the connection stays in step for the next write."""
    from schemas.records import NeighbourList
    from store.errors import ReplicaShortfall
    from store.redis_writes import ReplicaAck

    waiting = RedisStore(redis_url, store.layout, ack=ReplicaAck(replicas=1, timeout_ms=50))
    try:
        started = time.perf_counter()
        with pytest.raises(ReplicaShortfall, match="confirmed by 0 of 1 replica"):
            waiting.write_pairs([pair(3, 30, seed=1)], ttl_ms=60_000)
        assert time.perf_counter() - started >= 0.045  # WAIT waited its timeout
        with pytest.raises(ReplicaShortfall, match="2 writes applied"):
            waiting.write_neighbours(
                [NeighbourList(3, 1, (4,), (0.9,)), NeighbourList(5, 1, (6,), (0.8,))], 60_000
            )
        got = store.read(ReadBatch(pairs=[(3, 30)], neighbours=[3, 5]), 500)
        assert got.pairs[0] is not None and all(n is not None for n in got.neighbours)
        assert decode_vector(got.pairs[0]).array().tolist() == pair(3, 30, seed=1).array().tolist()
    finally:
        waiting.close()
