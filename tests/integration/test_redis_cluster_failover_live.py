"""A Redis Cluster master failover during a *timed* live replay: nothing lost, reads inside
their deadline, coverage back (issue 25, item 5).

The store is this test's own Redis Cluster, 3 masters + 3 replicas (``infra/redis.sh
cluster-start``, ``cluster-node-timeout`` 5 s); the pipeline and FM workers run as processes
with ``SOLARIS_STORE_BACKEND=redis-cluster`` and ``SOLARIS_REDIS_WAIT_REPLICAS=1`` (a write is
acknowledged only once its master's replica has it), the ranker service on a thread of the
test, and ``solaris replay`` plays the traffic in real time. A third of the way in, the master
owning the most of the run's keys is killed (SIGKILL). Its replica is promoted; the killed node
is then restarted, as a pod would be, and rejoins as the new master's replica (with replica
acknowledgements on, the promoted master's slots take no confirmed write until it has one).

Asserted: every verified pair is stored with the FM's vector for its verified history, every
aggregate equals the one folded from the run's own embeddings and the simulator's
(``nothing_lost``), nothing verified twice; every lookup made while the master was down ended
within the read deadline at p99 (plus the machine's measured wake-up lateness) and the slowest
within the deadline + 1 s (its connect and send are bounded by the socket timeout); an exact pair is
served again within :data:`RECOVERY_BOUND_S` of the kill; the ranker answered every request.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from redis.cluster import RedisCluster

from streams.settings import Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import STATELESS_RANKING, print_measured, wait_for
from tests.integration.live_harness import live_settings
from tests.integration.nothing_lost import check_nothing_lost
from tests.integration.redis_fault_helpers import (
    REPLAY_WALL_S,
    WakeupProbe,
    dense_traffic_file,
    finish,
    live_run,
    start_replay,
)
from tests.integration.replicated_cluster import (
    Cluster,
    replicated_cluster,
    wait_promoted,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timing]

#: seconds from the kill to an exact pair served again: promotion (~9 s measured at the store
#: level), the killed node's restart and full sync, and the writers' retry backoff (cap 5 s)
RECOVERY_BOUND_S = 45.0
#: tolerance of the p99 over the read deadline on top of the measured wake-up lateness (as the
#: Redis fault tests)
DEADLINE_SLACK_MS = 2.0
#: bound on the slowest lookup over the deadline: a read's connect and send are bounded by the
#: read socket timeout (1 s), not the deadline, and a lookup may have to connect to a promoted
#: master; measured once 127 ms (deadline 20 ms) beside the node's restart, p99 22.7 ms; the
#: store-level test once saw 590 ms (cause not found)
WORST_SLACK_MS = 1_000.0


def cluster_settings(bundle: Path, cluster: Cluster) -> Settings:
    """A unique prefix on the shared broker, the store on ``cluster`` with replica
    acknowledgements, the stateless verifier ranking (comparable with the simulator)."""
    base = Settings().model_copy(
        update={
            "store_backend": "redis-cluster",
            "store_url": cluster.url,
            "redis_wait_replicas": 1,
        }
    )
    require_kafka_and_redis(base)
    return live_settings(base, uuid.uuid4().hex[:10], bundle, partitions=2, **STATELESS_RANKING)


def busiest_master(settings: Settings) -> int:
    """The port of the master holding the most keys of this run now."""
    client = RedisCluster.from_url(settings.store_url)
    try:
        keys = list(client.scan_iter(match=f"{settings.key_prefix}:*", count=1000))
        owners = Counter(client.get_node_from_key(k).port for k in keys)
    finally:
        client.close()
    assert owners, "nothing stored yet: the failover would hit an empty store"
    return int(owners.most_common(1)[0][0])


def test_a_master_failover_mid_replay_loses_nothing(bundle: Path, tmp_path: Path) -> None:
    traffic = dense_traffic_file()
    with replicated_cluster(tmp_path / "cluster") as cluster:
        settings = cluster_settings(bundle, cluster)
        with live_run(settings, bundle, tmp_path) as (procs, ranker):
            replay = start_replay(settings, traffic, tmp_path)
            time.sleep(REPLAY_WALL_S / 3)
            victim = busiest_master(settings)
            replica, survivor = cluster.replica_and_survivor(victim)
            before = ranker.mark()
            with WakeupProbe(settings.read_deadline_ms) as wakeup:
                os.kill(cluster.pid(victim), signal.SIGKILL)
                killed_at = time.monotonic()
                promoted_at = wait_promoted(cluster, victim, replica, survivor)
                cluster.restart_stopped()  # the killed node rejoins as the new master's replica
                rejoined_at = time.monotonic()
                at_rejoin = ranker.mark()
            recovered_s = wait_for(
                "an exact pair served after the failover",
                lambda: ranker.mark().exact > at_rejoin.exact,
                60,
                poll_s=0.05,
            )
            recovered_at = time.monotonic()
            finish(replay, settings, procs)
            ranker.check()
            end = ranker.mark()
            log = procs.log("pipeline") + procs.log("fm")
        during = ranker.read_ms_between(before, at_rejoin)
        report = check_nothing_lost(settings, traffic, bundle)
    from models.data.traffic import load_requests

    allowed = settings.read_deadline_ms + DEADLINE_SLACK_MS + wakeup.p99()
    measured = {
        "promotion_s": promoted_at - killed_at,
        "rejoined_s": rejoined_at - killed_at,
        "exact_served_again_s": recovered_at - killed_at,
        "recovered_after_rejoin_s": recovered_s,
        "lookups_in_fault": len(during),
        "failed_reads_in_fault": at_rejoin.failed_reads - before.failed_reads,
        "read_max_ms_in_fault": float(during.max()) if len(during) else 0.0,
        "read_p99_ms_in_fault": float(np.percentile(during, 99)) if len(during) else 0.0,
        "allowed_ms": allowed,
        "write_retries_logged": log.count("store write failed; retrying"),
        "verified_pairs": report.verified,
        "vectors_checked": report.vectors_checked,
        "missing_in_store": len(report.missing_in_store),
    }
    print_measured("redis cluster master kill -9 mid replay", measured)
    assert end.requests == len(load_requests(traffic))  # the ranker answered every request
    assert len(during) >= 3, "too few lookups while the master was down to measure them"
    assert at_rejoin.failed_reads > before.failed_reads, "the kill never cost a read"
    assert "store write failed; retrying" in log, "no write hit the failover"
    assert measured["read_p99_ms_in_fault"] <= allowed, measured
    assert measured["read_max_ms_in_fault"] <= settings.read_deadline_ms + WORST_SLACK_MS, measured
    assert measured["exact_served_again_s"] <= RECOVERY_BOUND_S, measured
    report.assert_nothing_lost()
    assert not report.verified_twice, report.verified_twice[:3]
