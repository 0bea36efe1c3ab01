"""The FeatureStore contract on a real 3-master Redis Cluster, plus cluster-specific guarantees.

The cluster is started by ``infra/redis.sh cluster-start`` (127.0.0.1:7000-7002 unless
``SOLARIS_REDIS_CLUSTER_PORTS`` says otherwise) once per session and stopped at the end if this
session started it; a cluster already running there is reused. Without ``redis-server`` the
tests skip (fail under ``SOLARIS_REQUIRE_SERVICES``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

from store.cluster_slots import batch_slots, group_by_slot
from store.errors import StoreTimeout, StoreUnavailable
from store.factory import open_store
from store.keys import KeyLayout, read_keys
from store.protocol import ReadBatch
from store.reader import FeatureReader
from store.redis_cluster_store import RedisClusterStore
from store.tiers import Tier
from store.values import decode_vector
from streams.engine.config import ENGINE_DEFAULTS
from streams.settings import REPO_ROOT, Settings
from tests.contract.store_contract import StoreContract, pair

T0 = 1_700_000_000_000


def cluster_ports() -> list[int]:
    return [int(p) for p in os.environ.get("SOLARIS_REDIS_CLUSTER_PORTS", "7000 7001 7002").split()]


def _script(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "redis.sh"), command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def local_cluster() -> Iterator[str]:
    """The URL of a running local cluster: reused if up, else started here and stopped after."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        msg = "redis-server / redis-cli not installed (infra/redis.sh cluster-start installs them)"
        if Settings().require_services:
            pytest.fail(msg)
        pytest.skip(msg)
    started = _script("cluster-status").returncode != 0
    if started:
        run = _script("cluster-start")
        if run.returncode != 0:
            pytest.fail(f"infra/redis.sh cluster-start failed:\n{run.stdout}\n{run.stderr}")
    try:
        yield f"redis://127.0.0.1:{cluster_ports()[0]}"
    finally:
        if started:
            _script("cluster-stop")


def delete_prefix(url: str, prefix: str) -> None:
    client = RedisCluster.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for key in keys:
            client.delete(key)
    finally:
        client.close()


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    with local_cluster() as url:
        yield url


@pytest.fixture()
def store(cluster_url: str, unique: str) -> Iterator[RedisClusterStore]:
    s = RedisClusterStore(cluster_url, KeyLayout(f"t{unique}"))
    s.warm()  # as a FeatureReader does: no first read pays the slot table and the connects
    yield s
    s.close()
    delete_prefix(cluster_url, f"t{unique}")


@pytest.fixture()
def advance() -> Callable[[int], None]:
    return lambda ms: time.sleep(ms / 1000)


def cluster_topology_calls(client: RedisCluster) -> int:
    """``CLUSTER SLOTS`` / ``SHARDS`` / ``NODES`` commands served so far, over all primaries
    (``client`` is built once by the caller: building one asks for the slot table, too)."""
    total = 0
    for node in client.get_primaries():
        stats = client.get_redis_connection(node).info("commandstats")
        total += sum(
            int(v.get("calls", 0))
            for k, v in stats.items()
            if k.startswith("cmdstat_cluster|") and k.split("|")[1] in ("slots", "shards", "nodes")
        )
    return total


def mget_calls(url: str) -> dict[str, int]:
    """``MGET`` commands served so far, per primary."""
    client = RedisCluster.from_url(url)
    try:
        out = {}
        for node in client.get_primaries():
            stats = client.get_redis_connection(node).info("commandstats")
            out[node.name] = int(stats.get("cmdstat_mget", {}).get("calls", 0))
        return out
    finally:
        client.close()


@contextmanager
def paused_master(url: str, key: bytes, pause_ms: int) -> Iterator[None]:
    """``CLIENT PAUSE`` the master owning ``key`` (a stall without touching the process)."""
    admin = RedisCluster.from_url(url)
    node = admin.get_redis_connection(admin.get_node_from_key(key))
    try:
        node.execute_command("CLIENT", "PAUSE", pause_ms, "ALL")
        yield
    finally:
        node.execute_command("CLIENT", "UNPAUSE")
        admin.close()


def move_slot_of(url: str, key: bytes) -> None:
    """Reshard the slot of ``key`` (and its keys) to another master, as a live reshard does."""
    admin = RedisCluster.from_url(url)
    try:
        slot = key_slot(key)
        source = admin.get_node_from_key(key)
        target = next(n for n in admin.get_primaries() if n.name != source.name)
        src, dst = (admin.get_redis_connection(n) for n in (source, target))
        src_id, dst_id = (c.execute_command("CLUSTER", "MYID") for c in (src, dst))
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10_000)
        if keys:
            src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        for node in admin.get_primaries():
            admin.get_redis_connection(node).execute_command(
                "CLUSTER", "SETSLOT", slot, "NODE", dst_id
            )
    finally:
        admin.close()


def test_batch_slots_are_the_keys_slots_and_groups_keep_order() -> None:
    layout = KeyLayout("a")
    batch = ReadBatch(pairs=[(1, 1), (1, 2), (2, 1)], aggregates=[1, 2, 3], neighbours=[2])
    keys = read_keys(layout, batch)
    slots = batch_slots(layout, batch)
    assert slots == [key_slot(k) for k in keys]
    s1, s2, s3 = key_slot(b"{u1}"), key_slot(b"{u2}"), key_slot(b"{u3}")
    assert len({s1, s2, s3}) == 3
    assert group_by_slot(slots) == {s1: [0, 1, 3], s2: [2, 4, 6], s3: [5]}
    assert list(group_by_slot(slots)) == [s1, s2, s3]


@pytest.mark.integration
class TestRedisClusterStore(StoreContract):
    def test_cluster_has_three_masters_serving_all_slots(self, cluster_url: str) -> None:
        client = RedisCluster.from_url(cluster_url)
        try:
            assert len(client.get_primaries()) >= 3
            assert client.cluster_info()["cluster_state"] == "ok"
        finally:
            client.close()

    def test_first_read_of_a_user_is_one_mget_on_one_node(
        self, store: RedisClusterStore, cluster_url: str
    ) -> None:
        store.write_pairs([pair(7, i, seed=i) for i in range(0, 500, 5)], 60_000)
        before = mget_calls(cluster_url)
        res = store.read(
            ReadBatch(pairs=[(7, i) for i in range(500)], aggregates=[7], neighbours=[7]), 500
        )
        after = mget_calls(cluster_url)
        assert [v is not None for v in res.pairs] == [i % 5 == 0 for i in range(500)]
        deltas = {n: after[n] - before[n] for n in after}
        assert sorted(deltas.values()) == [0] * (len(deltas) - 1) + [1]
        assert store.mgets == 1 and store.round_trips == 1

    def test_neighbour_read_is_one_mget_per_slot_across_all_nodes(
        self, store: RedisClusterStore, cluster_url: str
    ) -> None:
        users = list(range(100, 164))
        store.write_pairs([pair(u, 5, seed=u) for u in users[::2]], 60_000)
        before = mget_calls(cluster_url)
        # round 2 of the reader: (neighbour, item) pairs user-major, then the neighbours'
        # aggregates; 64 users' hash tags spread over every master
        batch = ReadBatch(pairs=[(u, i) for u in users for i in (5, 6)], aggregates=users)
        res = store.read(batch, 500)
        after = mget_calls(cluster_url)
        slots = {key_slot(k) for k in store.keys_for(batch)}
        assert len(slots) == len(users)
        deltas = {n: after[n] - before[n] for n in after}
        assert sum(deltas.values()) == len(slots) == store.mgets
        assert all(d > 0 for d in deltas.values()), f"some master got no MGET: {deltas}"
        for j, u in enumerate(users):
            got, absent = res.pairs[2 * j], res.pairs[2 * j + 1]
            assert absent is None and res.aggregates[j] is None
            if u % 2:
                assert got is None
            else:
                assert got is not None
                np.testing.assert_array_equal(
                    decode_vector(got).array(), pair(u, 5, seed=u).array()
                )

    def test_reads_of_any_deadline_reuse_the_warmed_client(
        self, store: RedisClusterStore, cluster_url: str
    ) -> None:
        """A lookup's second round reads with whatever budget is left: each distinct deadline
        used to build its own client, which asked the cluster for its slot table (and opened
        new connections) inside that read's deadline."""
        store.write_pairs([pair(500, i, seed=i) for i in range(4)], 60_000)
        stats = RedisCluster.from_url(cluster_url)
        try:
            before = cluster_topology_calls(stats)
            for timeout_ms in (500.0, 437.3, 351.9, 288.4):
                res = store.read(ReadBatch(pairs=[(500, i) for i in range(4)]), timeout_ms)
                assert all(v is not None for v in res.pairs)
            assert cluster_topology_calls(stats) == before
        finally:
            stats.close()

    def test_a_stalled_master_costs_one_deadline_and_late_answers_are_dropped(
        self, store: RedisClusterStore, cluster_url: str
    ) -> None:
        """Deadline D = 400 ms, one master paused for 600 ms: the first read times out at D; the
        second (same deadline, so the same connection pool) is sent while the master is still
        paused and must get its own answers, not the first read's late ones."""
        users = list(range(200, 248))
        store.write_pairs([pair(u, i, seed=1000 * i + u) for u in users for i in (1, 2)], 60_000)
        store.read(ReadBatch(pairs=[(u, 1) for u in users]), timeout_ms=400)  # connect first
        with paused_master(cluster_url, store.layout.pair(users[0], 1), 600):
            t0 = time.perf_counter()
            with pytest.raises(StoreTimeout):
                store.read(ReadBatch(pairs=[(u, 1) for u in users]), timeout_ms=400)
            took = time.perf_counter() - t0
            res = store.read(ReadBatch(pairs=[(u, 2) for u in users]), timeout_ms=400)
        print(f"stalled master: read raised after {took * 1000:.0f} ms (deadline 400 ms)")
        assert took < 0.55
        for u, raw in zip(users, res.pairs, strict=True):
            assert raw is not None
            want = pair(u, 2, seed=2000 + u).array()
            np.testing.assert_array_equal(decode_vector(raw).array(), want)

    def test_reader_serves_missing_within_its_deadline_when_a_master_stalls(
        self, store: RedisClusterStore, cluster_url: str
    ) -> None:
        store.write_pairs([pair(300, i, seed=i) for i in range(20)], 60_000)
        # The unstalled read has a generous deadline: a cold first read (slot table, connections)
        # on a loaded CI machine can itself take over 100 ms (it did once: all MISSING).
        patient = FeatureReader(store, replace(ENGINE_DEFAULTS.reader, dim=8, deadline_ms=5000.0))
        fresh = patient.lookup(300, range(20), T0 + 1)
        assert (fresh.tiers == Tier.EXACT).all()
        reader = FeatureReader(store, replace(ENGINE_DEFAULTS.reader, dim=8, deadline_ms=100.0))
        with paused_master(cluster_url, store.layout.pair(300, 0), 1000):
            t0 = time.perf_counter()
            out = reader.lookup(300, range(20), T0 + 1)
            took = time.perf_counter() - t0
        assert (out.tiers == Tier.MISSING).all() and reader.stats.timeouts == 1
        assert took < 0.5, f"lookup took {took * 1000:.0f} ms with a 100 ms deadline"

    def test_a_moved_slot_fails_one_read_then_reads_go_to_the_new_owner(
        self, store: RedisClusterStore, cluster_url: str
    ) -> None:
        user = 400
        store.write_pairs([pair(user, i, seed=i) for i in range(10)], 60_000)
        batch = ReadBatch(pairs=[(user, i) for i in range(10)])
        assert all(v is not None for v in store.read(batch, 500).pairs)  # slot table cached
        move_slot_of(cluster_url, store.layout.pair(user, 0))
        with pytest.raises(StoreUnavailable, match="moved to"):
            store.read(batch, 500)
        res = store.read(batch, 500)
        for i, raw in enumerate(res.pairs):
            assert raw is not None
            np.testing.assert_array_equal(decode_vector(raw).array(), pair(user, i, seed=i).array())

    def test_factory_opens_the_cluster_backend(self, cluster_url: str) -> None:
        store = open_store("redis-cluster", url=cluster_url)
        try:
            assert isinstance(store, RedisClusterStore) and store.ping()
        finally:
            store.close()

    def test_unreachable_cluster_raises_store_error_quickly(self) -> None:
        dead = RedisClusterStore("redis://127.0.0.1:1")
        t0 = time.perf_counter()
        with pytest.raises(StoreUnavailable):
            dead.read(ReadBatch(pairs=[(1, 1)]), timeout_ms=50)
        assert time.perf_counter() - t0 < 2.0
        assert not dead.ping()
        with pytest.raises(StoreUnavailable):
            dead.write_pairs([pair(1, 1)], 1000)
        dead.close()
