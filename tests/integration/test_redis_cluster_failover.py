"""A master failover under load: Redis Cluster of 3 masters + 3 replicas, one master kill -9'd.

The cluster is this test's own (``infra/redis.sh cluster-start`` with
``SOLARIS_REDIS_CLUSTER_REPLICAS=1`` on free ports, ``cluster-node-timeout`` 5 s, its own
directory; stopped at the end). A writer writes new pairs of 30 users every 50 ms through
:class:`~store.redis_cluster_store.RedisClusterStore` wrapped in
:func:`streams.live.retry.write_with_retry`, as the FM worker does; a :class:`FeatureReader` on
its own store looks up a fixed set of 300 pairs (written and replicated before the fault) in
rounds, with a 100 ms deadline. Then the master owning user 0's slot is killed with SIGKILL.

Asserted: its replica is promoted (``CLUSTER NODES``) within 12 s; writes go on after the
promotion (retried until the new master takes them); every write acknowledged after the kill is
readable afterwards, and so is every write acknowledged more than 1 s before it (Redis
replication is asynchronous: a write acknowledged by the old master just before the kill may not
have reached the replica; how many were lost is printed); lookups p99 within the deadline +
50 ms, none longer than the deadline + the read socket timeout (1 s), at most 2 % timed out;
the fixed set is fully readable again within 15 s of the kill and stays so. Before the store re-read its slot table after a failed
read or write, reads and writes of the dead master's slots failed until the process restarted.

Measured numbers go to the output (``pytest -s``) as a ``FAULT MATRIX`` line for
docs/live-pipeline.md.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from store.keys import KeyLayout
from store.protocol import ReadBatch
from store.reader import FeatureReader
from store.redis_cluster_store import RedisClusterStore
from store.tiers import Tier
from streams.engine.config import ENGINE_DEFAULTS
from streams.live.retry import write_with_retry
from tests.contract.store_contract import pair
from tests.integration.fault_harness import print_measured
from tests.integration.replicated_cluster import (
    Cluster,
    replicated_cluster,
    wait_promoted,
    wait_replicated,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timing]

T0 = 1_700_000_000_000
TTL_MS = 600_000
USERS = list(range(30))
ITEMS = list(range(10))  # the fixed set: USERS x ITEMS, written before the fault
DEADLINE_MS = 100.0
#: bounds asserted (measured: see docs/live-pipeline.md, fault matrix)
PROMOTION_BOUND_S = 12.0
RECOVERY_BOUND_S = 15.0
#: the slowest lookup: a read's deadline bounds its wait for answers, its connect and send are
#: bounded by the read socket timeout (``_READ_IO_TIMEOUT_S``, 1 s); a CI run saw one lookup of
#: 7,860 take 590 ms (p99 6.5 ms), cause not found, so the bound is that documented worst case
WORST_LOOKUP_S = 1.0 + DEADLINE_MS / 1000
#: p99 of the lookups over the deadline (measured 5.1-13.0 ms at a 100 ms deadline)
P99_SLACK_MS = 50.0
#: after the promotion, the first write is acknowledged within write_with_retry's backoff cap (5 s)
WRITE_RESUME_BOUND_S = 6.5
TIMEOUT_SHARE_BOUND = 0.02
#: a write acknowledged this long before the kill must have reached the replica
REPLICATION_WINDOW_S = 1.0


@dataclass
class Writer:
    """New pairs of every user every 50 ms (items 1000 + seq), through ``write_with_retry``."""

    store: RedisClusterStore
    stop: threading.Event = field(default_factory=threading.Event)
    acked: list[tuple[int, float]] = field(default_factory=list)  # (seq, monotonic ack time)
    error: BaseException | None = None

    async def _loop(self) -> None:
        seq = 0
        while not self.stop.is_set():
            batch = [pair(u, 1000 + seq, seed=seq) for u in USERS]
            await write_with_retry("write_pairs", lambda b=batch: self.store.write_pairs(b, TTL_MS))
            self.acked.append((seq, time.monotonic()))
            seq += 1
            await asyncio.sleep(0.05)

    def run(self) -> None:
        try:
            asyncio.run(self._loop())
        except BaseException as exc:  # re-raised by the test
            self.error = exc


@dataclass
class Rounds:
    """Lookups of the fixed set, round after round: (start, exact share) per round, latencies."""

    reader: FeatureReader
    stop: threading.Event = field(default_factory=threading.Event)
    rounds: list[tuple[float, float]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def run(self) -> None:
        while not self.stop.is_set():
            start, exact = time.monotonic(), 0
            for user in USERS:
                t = time.perf_counter()
                out = self.reader.lookup(user, ITEMS, T0 + 1)
                self.latencies.append(time.perf_counter() - t)
                exact += int((out.tiers == Tier.EXACT).sum())
            self.rounds.append((start, exact / (len(USERS) * len(ITEMS))))
            time.sleep(0.02)


def _span(times: list[float]) -> float:
    return max(times) - min(times) if times else 0.0


def lost_writes(url: str, prefix: str, seqs: list[int]) -> dict[int, int]:
    """Pairs not readable now, per write batch (seq) that has any."""
    store = RedisClusterStore(url, KeyLayout(prefix))
    lost: dict[int, int] = {}
    try:
        for start in range(0, len(seqs), 15):
            keys = sorted((u, 1000 + s) for s in seqs[start : start + 15] for u in USERS)
            values = store.read(ReadBatch(pairs=keys), timeout_ms=5_000).pairs
            for (_, item), value in zip(keys, values, strict=True):
                if value is None:
                    lost[item - 1000] = lost.get(item - 1000, 0) + 1
    finally:
        store.close()
    return lost


def test_a_master_failover_loses_no_acknowledged_write_and_coverage_returns(
    tmp_path: Path,
) -> None:
    prefix = "fo"
    with replicated_cluster(tmp_path / "cluster") as cluster:
        writer_store = RedisClusterStore(cluster.url, KeyLayout(prefix))
        reader_store = RedisClusterStore(cluster.url, KeyLayout(prefix))
        try:
            _run_failover(cluster, prefix, writer_store, reader_store)
        finally:
            writer_store.close()
            reader_store.close()


def _run_failover(
    cluster: Cluster, prefix: str, writer_store: RedisClusterStore, reader_store: RedisClusterStore
) -> None:
    writer_store.write_pairs([pair(u, i, seed=i) for u in USERS for i in ITEMS], TTL_MS)
    wait_replicated(cluster)
    reader_store.warm()
    config = replace(ENGINE_DEFAULTS.reader, dim=8, deadline_ms=DEADLINE_MS)
    rounds, writer = Rounds(FeatureReader(reader_store, config)), Writer(writer_store)
    threads = [threading.Thread(target=w.run, daemon=True) for w in (rounds, writer)]
    for t in threads:
        t.start()

    # the victim: the master owning user 0's slot; its replica; a survivor to ask
    owner = writer_store._writer_client().get_node_from_key(writer_store.layout.pair(0, 0))
    replica, survivor = cluster.replica_and_survivor(owner.port)
    time.sleep(2.0)
    assert rounds.rounds and all(share == 1.0 for _, share in rounds.rounds), rounds.rounds
    os.kill(cluster.pid(owner.port), signal.SIGKILL)
    killed_at = time.monotonic()
    promoted_at = wait_promoted(cluster, owner.port, replica, survivor)

    def recovered() -> bool:  # full coverage for 3 s, and writes acknowledged since
        full = [s for s, share in rounds.rounds if s > promoted_at and share == 1.0]
        return (
            bool(full) and rounds.rounds[-1][0] - full[0] >= 3.0 and writer.acked[-1][1] > full[0]
        )

    while not recovered() and time.monotonic() - killed_at < 60:
        assert writer.error is None, writer.error
        time.sleep(0.1)
    writer.stop.set()
    rounds.stop.set()
    for t in threads:
        t.join(30)
    assert writer.error is None, writer.error
    _check(cluster, prefix, rounds, writer, (killed_at, promoted_at), survivor, reader_store)


def _check(
    cluster: Cluster,
    prefix: str,
    rounds: Rounds,
    writer: Writer,
    times: tuple[float, float],
    survivor: int,
    reader_store: RedisClusterStore,
) -> None:
    killed_at, promoted_at = times
    after = [(s - killed_at, share) for s, share in rounds.rounds if s >= killed_at]
    dips = [t for t, share in after if share < 1.0]
    full_from = next(t for t, share in reversed(after) if share < 1.0) if dips else 0.0
    recovered_s = next((t for t, share in after if t > full_from and share == 1.0), None)
    acked_after_kill = [(s, t) for s, t in writer.acked if t > killed_at]
    survivor_url = f"redis://127.0.0.1:{survivor}"  # the URL's node may be the dead one
    lost = lost_writes(survivor_url, prefix, [s for s, _ in writer.acked])
    lost_before = {s: t for s, t in writer.acked if s in lost and t <= killed_at}
    latencies = np.array(rounds.latencies)
    stats = rounds.reader.stats
    measured = {
        "promotion_s": promoted_at - killed_at,
        "first_write_after_kill_s": (acked_after_kill[0][1] - killed_at)
        if acked_after_kill
        else -1.0,
        "batches_acked": len(writer.acked),
        "pairs_lost_acked_before_kill": sum(lost[s] for s in lost_before),
        "lost_batches_acked_s_before_kill": [round(killed_at - t, 3) for t in lost_before.values()],
        "lookups": stats.calls,
        "timeouts": stats.timeouts,
        "store_errors": stats.store_errors,
        "p99_ms": float(np.percentile(latencies, 99)) * 1000,
        "max_ms": float(latencies.max()) * 1000,
        "min_coverage": min(share for _, share in after),
        # CLUSTERDOWN on every node between the master's FAIL flag and the promotion
        # (cluster-require-full-coverage yes, the default): no lookup of any user is served
        "zero_coverage_rounds_s": _span([t for t, share in after if share == 0.0]),
        "full_coverage_after_s": recovered_s if recovered_s is not None else -1.0,
        "refreshes_reader": reader_store.topology_refreshes,
        "refreshes_writer": writer.store.topology_refreshes,
    }
    print_measured("redis cluster master kill -9", measured)
    nodes = cluster.nodes(survivor)
    assert sum("master" in f and "fail" not in f for _, f, _ in nodes.values()) == 3, nodes
    assert measured["promotion_s"] <= PROMOTION_BOUND_S
    assert dips, "the kill never cost a lookup its pairs: the fault did not hit the reads"
    assert recovered_s is not None and recovered_s <= RECOVERY_BOUND_S, measured
    assert all(share == 1.0 for t, share in after if t > full_from)
    # the writer's retry backs off up to 5 s (write_with_retry's cap): its first try after the
    # promotion re-reads the slot table and goes to the new master
    assert acked_after_kill and acked_after_kill[0][1] <= promoted_at + WRITE_RESUME_BOUND_S
    assert not [s for s, t in writer.acked if s in lost and t > killed_at], "acked after the kill"
    assert not [s for s, t in writer.acked if s in lost and t < killed_at - REPLICATION_WINDOW_S], (
        "a write acknowledged well before the kill is lost"
    )
    assert measured["p99_ms"] <= DEADLINE_MS + P99_SLACK_MS, measured
    assert measured["max_ms"] <= WORST_LOOKUP_S * 1000, measured
    assert stats.timeouts <= TIMEOUT_SHARE_BOUND * stats.calls, measured
