"""Fault matrix, worker faults, on the shared broker and Redis (own topic/key prefixes).

- **FM worker kill -9 mid-batch**, restarted: the FM group commits less often than it embeds
  (``SOLARIS_FAUST_COMMIT_INTERVAL_S=2`` for that worker: a production-like interval), so batches
  embedded but not committed when the worker dies are redelivered to its successor. The test
  demands that a redelivery happened (pairs embedded twice in the ``embeddings`` topic) and that
  nothing was lost or counted twice (aggregates dedupe redelivered embeddings).
- **A second pipeline worker joins and leaves mid-replay**: it takes over part of the partitions
  (and their table state, recovered from the changelogs), processes them, then stops (SIGTERM:
  it leaves the group) and the first worker takes them back, again recovering the tables from
  the changelogs. Lost table state would show as pairs verified twice (ledger), aggregates with
  another count (aggregate buckets) or missing in the simulator comparison.

Both replay in real time (``TimedReplay``) so several requests are in flight at the fault, and
both end with :func:`tests.integration.fault_harness.check_nothing_lost`.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from streams.lag import LagReader
from streams.live.stats import read_stats
from streams.settings import Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import (
    STATELESS_RANKING,
    FaultProcs,
    TimedReplay,
    fault_pipeline,
    pair_keys,
    print_measured,
    wait_caught_up,
    wait_for,
)
from tests.integration.live_harness import live_settings
from tests.integration.nothing_lost import check_nothing_lost

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _settings(bundle: Path) -> Settings:
    base = Settings()
    require_kafka_and_redis(base)
    return live_settings(base, uuid.uuid4().hex[:10], bundle, **STATELESS_RANKING)


def _members(reader: LagReader, group: str) -> dict[str, set[tuple[str, int]]]:
    """member id -> its (topic, partition) assignment, for a Stable ``group`` ({} otherwise)."""
    from confluent_kafka import ConsumerGroupState

    desc = reader.admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    if desc.state != ConsumerGroupState.STABLE:
        return {}
    return {
        m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
        for m in desc.members
        if m.assignment is not None
    }


def _committed(reader: LagReader, group: str, topic: str) -> dict[int, int]:
    return {r.partition: r.committed for r in reader.lag([group], [topic])}


def test_fm_worker_kill9_mid_batch_redelivers_and_loses_nothing(
    traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    settings = _settings(bundle)
    fm_env = {"SOLARIS_FAUST_COMMIT_INTERVAL_S": "2.0"}
    with fault_pipeline(settings, tmp_path, fm_env=fm_env) as procs:
        replay = TimedReplay(settings, traffic_faults, TimedReplay.speed_for(traffic_faults, 30))
        replay.start()
        # Kill while pairs are flowing: right after the count grew (a batch was just written).
        wait_for("300 pairs embedded", lambda: pair_keys(settings) >= 300, timeout_s=180)
        before = pair_keys(settings)
        wait_for("the next FM batch", lambda: pair_keys(settings) > before, timeout_s=60)
        t_kill = time.monotonic() - replay.started_at
        procs.kill9("fm")
        killed = time.monotonic()
        procs.start("fm", "worker", "--agents", "embed", env=fm_env)
        time.sleep(0.5)  # a write the dead worker had sent may still land
        at_kill = pair_keys(settings)
        wait_for(
            "the FM worker to embed again",
            lambda: pair_keys(settings) > at_kill,
            timeout_s=180,
        )
        resumed_s = time.monotonic() - killed
        stats = replay.join()
        drain_s = wait_caught_up(settings, procs)
        time.sleep(1.5)  # counters are published once a second
    report = check_nothing_lost(settings, traffic_faults, bundle)
    measured: dict[str, Any] = {
        "requests": stats.requests,
        "pairs_at_kill": at_kill,
        "kill_at_s": t_kill,
        "embedding_resumed_after_s": resumed_s,
        "drain_after_replay_s": drain_s,
        "verified_pairs": report.verified,
        "verified_twice": report.verified_duplicates,
        "embedded_twice": report.embedding_duplicates,
        "fm_pairs_counted": int(read_stats(settings)["pipeline"].get("embedded", 0)),
    }
    print_measured("FM worker kill -9", measured)
    report.assert_nothing_lost()
    assert report.embedding_duplicates > 0, "no redelivery seen: the kill did not hit mid-batch"


def test_pipeline_worker_kill9_mid_timed_replay_loses_nothing(
    traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    """kill -9 of the stateful pipeline worker while requests are in flight in every stage,
    restarted at once on its own state dir: its tables come back from RocksDB and the
    changelogs, its uncommitted batches are read again. A redelivered request may be verified
    again (its ``verified`` message was delivered, the ledger's changelog write was not): the
    same pairs at the same event time, so harmless, and counted; anything else is a loss."""
    settings = _settings(bundle)
    with fault_pipeline(settings, tmp_path) as procs:
        replay = TimedReplay(settings, traffic_faults, TimedReplay.speed_for(traffic_faults, 30))
        replay.start()
        wait_for("150 pairs embedded", lambda: pair_keys(settings) >= 150, timeout_s=180)
        t_kill = time.monotonic() - replay.started_at
        at_kill = pair_keys(settings)
        procs.kill9("pipeline")
        killed = time.monotonic()
        procs.start_pipeline_worker()
        wait_for(
            "the restarted pipeline worker to verify again",
            lambda: pair_keys(settings) > at_kill + 20,
            timeout_s=180,
        )
        resumed_s = time.monotonic() - killed
        back_mid_replay = replay.running
        stats = replay.join()
        drain_s = wait_caught_up(settings, procs)
        procs.alive()
    report = check_nothing_lost(settings, traffic_faults, bundle)
    redelivered = set(report.verified_twice)
    report.verified_twice = []  # the same request verified again: at-least-once, not a loss
    measured: dict[str, Any] = {
        "requests": stats.requests,
        "pairs_at_kill": at_kill,
        "kill_at_s": t_kill,
        "pairs_again_after_s": resumed_s,
        "back_before_the_replay_ended": back_mid_replay,
        "drain_after_replay_s": drain_s,
        "verified_pairs": report.verified,
        "verified_again_same_request": len(redelivered),
        "embedded_twice": report.embedding_duplicates,
    }
    print_measured("pipeline worker kill -9 (timed)", measured)
    report.assert_nothing_lost()


# Failed in 5 of 9 runs before streams/live/faust_commits.py: around a rebalance Faust skipped
# single requests (requests-3 offset 30 reached neither worker while 29 and 31 did) and
# committed past them (off by one in its commit check), or dropped re-fetched offsets below a
# stale read position and its commits stopped (impressions-0 at 150 of 785, lag never 0).
def test_second_pipeline_worker_joins_and_leaves_mid_replay(
    traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    settings = _settings(bundle)
    group, requests = f"{settings.topic_prefix}-pipeline", settings.topic("requests")
    reader = LagReader(settings)
    procs: FaultProcs
    try:
        with fault_pipeline(settings, tmp_path) as procs:
            replay = TimedReplay(
                settings, traffic_faults, TimedReplay.speed_for(traffic_faults, 40)
            )
            replay.start()
            wait_for("100 pairs embedded", lambda: pair_keys(settings) >= 100, timeout_s=180)
            first = set(_members(reader, group))
            joined = time.monotonic()
            procs.start_pipeline_worker("pipeline2", data_dir=tmp_path / "worker2")
            join_s = wait_for(
                "the second worker to own partitions",
                lambda: sum(1 for m in _members(reader, group).values() if m) == 2,
                timeout_s=120,
            )
            second = [a for m, a in _members(reader, group).items() if m not in first]
            took = sorted(p for t, p in second[0] if t == requests) if second else []
            assert took, f"the second worker was assigned no requests partition: {second}"
            wait_for(
                "the second worker to recover its tables",
                lambda: "[^Worker]: Ready" in procs.log("pipeline2"),
                timeout_s=120,
            )
            at_join = _committed(reader, group, requests)
            wait_for(
                "the second worker to commit requests",
                lambda: any(_committed(reader, group, requests)[p] > at_join[p] for p in took),
                timeout_s=120,
            )
            moved = {p: _committed(reader, group, requests)[p] - at_join[p] for p in took}
            assert replay.running, "the replay ended before the second worker left"
            left = time.monotonic()
            os.killpg(procs.procs["pipeline2"].pid, signal.SIGTERM)
            procs.procs.pop("pipeline2").wait(timeout=60)
            wait_for(
                "the first worker to own every partition again",
                lambda: len(_members(reader, group)) == 1,
                timeout_s=120,
            )
            leave_s = time.monotonic() - left
            stats = replay.join()
            drain_s = wait_caught_up(settings, procs, timeout_s=90)
            when = {"join_at_s": joined - replay.started_at, "leave_at_s": left - replay.started_at}
    finally:
        reader.close()
    report = check_nothing_lost(settings, traffic_faults, bundle)
    measured: dict[str, Any] = {
        "requests": stats.requests,
        **when,
        "join_rebalance_s": join_s,
        "second_worker_partitions": took,
        "requests_committed_by_second": sum(moved.values()),
        "leave_rebalance_s": leave_s,
        "drain_after_replay_s": drain_s,
        "verified_pairs": report.verified,
        "verified_twice": report.verified_duplicates,
        "embedded_twice": report.embedding_duplicates,
    }
    print_measured("second pipeline worker joins and leaves", measured)
    report.assert_nothing_lost()  # includes: no pair verified twice (table state recovered)
