"""Fault matrix, Redis side: the live pipeline on its own redis-server while Redis misbehaves.

Each test starts a private Redis (``infra/redis.sh`` on a free port; the shared 6379 one is never
touched), the pipeline and FM workers as processes (``fault_harness.fault_pipeline``, pointed at
that Redis), the ranker service on a thread of this process (so the latency and tiers of the
reads made *during* the fault can be sliced out), and replays traffic in real time from a
separate ``solaris replay`` process (timed, not lockstep: requests are in flight in every stage
when the fault hits, and the replay's Python work does not share the ranker's interpreter).

- restart (non-persistent): everything in Redis is lost; writes resume and coverage recovers;
- black hole (SIGSTOP): the ranker's reads end within the deadline and serve *missing*;
  the writers retry and nothing verified is lost after SIGCONT.

``maxmemory`` with eviction is in ``test_faults_redis_maxmemory.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tests.integration.fault_harness import (
    pair_keys,
    print_measured,
    wait_for,
)
from tests.integration.nothing_lost import check_nothing_lost
from tests.integration.redis_fault_helpers import (
    REPLAY_WALL_S,
    Mark,
    WakeupProbe,
    dense_traffic_file,
    end_offsets,
    faulted_settings,
    finish,
    live_run,
    start_replay,
    verified_messages,
)
from tests.integration.redis_instance import own_redis

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: tolerance over the read deadline (issue 12: a lookup returns within deadline + 2 ms), on top
#: of the machine's own wake-up lateness, measured by :class:`WakeupProbe` during the same fault
DEADLINE_SLACK_MS = 2.0
#: lookups the in-process ranker may have under way when a mark reads its counters
IN_FLIGHT_AT_MARKS = 2
#: coverage after a Redis restart, as a fraction of the share before it (each window from an
#: empty store: the replay's start, the restart). Any tier: aggregates are rebuilt whole at a
#: user's next embedding, so the share served recovers fully. Exact: pairs lost in the restart
#: are not re-embedded for SOLARIS_REFRESH_AFTER_MS (docs/live-pipeline.md, "What a
#: non-persistent Redis loses on restart"), so the exact share stays lower; only new pairs are
#: served exact again
SERVED_SHARE_RECOVERED = 0.9
EXACT_SHARE_RECOVERED = 0.5


@pytest.fixture(scope="module")
def dense_traffic() -> Path:
    return dense_traffic_file()


def test_redis_restart_mid_replay_recovers(
    dense_traffic: Path, bundle: Path, tmp_path: Path
) -> None:
    """A non-persistent Redis restarted mid-replay comes back empty. Nothing crashes, writes
    resume (every pair verified after the restart is stored, with aggregates rebuilt from the
    workers' tables) and the ranker's coverage recovers: the share of lookups served after the
    restart is at least the stated fractions of the share before it."""
    from models.data.traffic import load_requests

    with own_redis(tmp_path / "redis") as rds:
        settings = faulted_settings(bundle, rds)
        with live_run(settings, bundle, tmp_path) as (procs, ranker):
            replay = start_replay(settings, dense_traffic, tmp_path)
            time.sleep(REPLAY_WALL_S / 3)
            client = rds.client()
            keys_lost = int(client.dbsize())
            client.close()
            before = ranker.mark()
            t_down = time.monotonic()
            rds.stop()
            cut = end_offsets(settings, settings.topic("verified"))  # later ones: written after
            rds.start()
            down_s = time.monotonic() - t_down
            at_up = ranker.mark()
            first_write_s = wait_for(
                "a pair written to the new Redis", lambda: pair_keys(settings) > 0, 60, 0.05
            )
            recovery_s = wait_for(
                "an exact pair served after the restart",
                lambda: ranker.mark().exact > at_up.exact,
                60,
                poll_s=0.05,
            )
            finish(replay, settings, procs)
            ranker.check()
            end = ranker.mark()
        after = {
            (m.user_id, i)
            for m in verified_messages(settings)
            if m.offset >= cut[m.partition]
            for i in m.item_ids
        }
        report = check_nothing_lost(settings, dense_traffic, bundle)
    n_requests = len(load_requests(dense_traffic))
    lost_after = sorted(after & set(report.missing_in_store))
    shares = {
        "served_share_before": before.served_share_since(Mark(0, 0, 0, 0, 0, 0)),
        "served_share_after": end.served_share_since(at_up),
        "exact_share_before": before.exact_share_since(Mark(0, 0, 0, 0, 0, 0)),
        "exact_share_after": end.exact_share_since(at_up),
    }
    print_measured(
        "redis restart",
        {
            "keys_lost": keys_lost,
            "down_s": down_s,
            "first_write_s": first_write_s,
            "recovery_s": recovery_s,
            **{k: f"{v:.3f}" for k, v in shares.items()},
            "lookups_before": before.served + before.missing,
            "lookups_after": end.served + end.missing - at_up.served - at_up.missing,
            "reads_failed_in_outage": at_up.failed_reads - before.failed_reads,
            "pairs_verified_after": len(after),
            "of_them_missing": len(lost_after),
            "pairs_missing_total": len(report.missing_in_store),
            "aggregates_stored": report.aggregates,
            "aggregates_absent": len(report.aggregates_absent),
            "verified_twice": report.verified_duplicates,
        },
    )
    assert keys_lost > 0, "the restart happened before anything was stored"
    assert end.requests == n_requests  # the ranker answered every request
    assert after, "nothing was verified after the restart: the fault came too late"
    assert not lost_after, f"{len(lost_after)} pairs verified after the restart not stored"
    assert not report.stale_in_store and not report.missing_in_embeddings
    assert report.vectors_checked and not report.wrong_vectors, report.wrong_vectors[:3]
    # rebuilt aggregates equal the run's own embeddings and have the simulator's count and time
    assert not report.aggregate_mismatch, report.aggregate_mismatch[:3]
    assert not report.aggregate_vs_simulator, report.aggregate_vs_simulator[:3]
    assert not report.only_live and not report.only_simulated  # Redis never steers the pipeline
    assert not report.verified_twice, report.verified_twice[:3]
    assert shares["exact_share_before"] > 0, "nothing served exact before the restart"
    for tier, fraction in (("served", SERVED_SHARE_RECOVERED), ("exact", EXACT_SHARE_RECOVERED)):
        was, now = shares[f"{tier}_share_before"], shares[f"{tier}_share_after"]
        assert now >= fraction * was, (
            f"{tier} share {now:.3f} after the restart < {fraction} x {was:.3f} before"
        )


#: a read-latency bound: beside other test processes a loaded CI machine broke it (read p99
#: 44.6 ms against 35.1 allowed, stop 45's CI run), so it runs with the other `timing` tests
@pytest.mark.timing
def test_redis_black_holed_reads_meet_deadline_and_writes_lose_nothing(
    dense_traffic: Path, bundle: Path, tmp_path: Path
) -> None:
    """Redis frozen (SIGSTOP) mid-replay for longer than the writers' socket timeout."""
    with own_redis(tmp_path / "redis") as rds:
        settings = faulted_settings(bundle, rds)
        deadline = settings.read_deadline_ms
        with live_run(settings, bundle, tmp_path) as (procs, ranker):
            replay = start_replay(settings, dense_traffic, tmp_path)
            time.sleep(REPLAY_WALL_S / 4)
            rds.freeze()
            try:
                time.sleep(0.5)  # reads already past the store when it froze are not counted
                with WakeupProbe(deadline) as wakeup:
                    start = ranker.mark()
                    time.sleep(7.0)  # longer than the writers' 5 s socket timeout
                    end = ranker.mark()
                procs.alive()
            finally:
                rds.thaw()
            recovery_s = wait_for(
                "an exact pair served after SIGCONT",
                lambda: ranker.mark().exact > end.exact,
                60,
                poll_s=0.05,
            )
            finish(replay, settings, procs)
            ranker.check()
            log = procs.log("pipeline") + procs.log("fm")
        during = ranker.read_ms_between(start, end)
        report = check_nothing_lost(settings, dense_traffic, bundle)
    n = end.requests - start.requests
    p50, p99, worst = np.percentile(during, [50, 99, 100]) if n else (np.nan,) * 3
    allowed = deadline + DEADLINE_SLACK_MS + wakeup.p99()
    print_measured(
        "redis black hole",
        {
            "requests_in_fault": n,
            "read_p50_ms": float(p50),
            "read_p99_ms": float(p99),
            "read_max_ms": float(worst),
            "deadline_ms": deadline,
            "sleep_late_p99_ms": wakeup.p99(),
            "failed_reads": end.failed_reads - start.failed_reads,
            "served_in_fault": end.served - start.served,
            "recovery_s": recovery_s,
            "write_retries_logged": log.count("store write failed; retrying"),
            "verified_pairs": report.verified,
            "missing_in_store": len(report.missing_in_store),
        },
    )
    assert n >= 3, "too few requests arrived during the fault to measure it"
    assert p99 <= allowed, f"read p99 {p99:.2f} ms during the fault (allowed {allowed:.2f})"
    # every read during the fault counted once as a timeout/error, and none served; a lookup
    # in flight at either mark may fall on either side of it (a loaded run counted 65 for 63)
    failed = end.failed_reads - start.failed_reads
    assert end.served == start.served, "a lookup was served from the frozen store"
    assert abs(failed - n) <= IN_FLIGHT_AT_MARKS, f"{failed} failed reads for {n} requests"
    assert end.served == start.served  # and served as missing
    assert "store write failed; retrying" in log
    report.assert_nothing_lost()
