"""Fault matrix, Redis side: the live pipeline on its own redis-server while Redis misbehaves.

Each test starts a private Redis (``infra/redis.sh`` on a free port; the shared 6379 one is never
touched), the pipeline and FM workers as processes (``fault_harness.fault_pipeline``, pointed at
that Redis), the ranker service on a thread of this process (so the latency and tiers of the
reads made *during* the fault can be sliced out), and replays traffic in real time from a
separate ``solaris replay`` process (timed, not lockstep: requests are in flight in every stage
when the fault hits, and the replay's Python work does not share the ranker's interpreter).

- restart (non-persistent): everything in Redis is lost; writes resume and coverage recovers;
- black hole (SIGSTOP): the ranker's reads end within the deadline and serve *missing*;
  the writers retry and nothing verified is lost after SIGCONT;
- ``maxmemory`` with ``volatile-ttl`` eviction: writes never fail, evicted pairs read *missing*,
  every pair or aggregate absent afterwards was evicted (named by a keyspace notification) and
  every aggregate still stored is the folded and the simulator's.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from store.keys import KeyLayout
from store.tiers import Tier
from streams.settings import Settings
from tests.integration.fault_harness import (
    pair_keys,
    print_measured,
    wait_for,
)
from tests.integration.nothing_lost import check_nothing_lost
from tests.integration.redis_fault_helpers import (
    REPLAY_WALL_S,
    EvictionLog,
    InProcessRanker,
    Mark,
    MemorySampler,
    Verified,
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


#: the eviction policy docs/live-pipeline.md documents for the store ("Fault matrix"): every value
#: pipeline writes has a TTL, so ``volatile-ttl`` evicts the values nearest to expiry first —
#: the oldest pair embeddings (4 h TTL) before aggregates and neighbour lists (24 h) — and never
#: the stats hashes (no TTL). The Redis default, ``noeviction``, fails every write instead.
EVICTION_POLICY = "volatile-ttl"
#: memory allowed above what Redis used when the cap is set (a fraction of what the rest of the
#: replay writes, so eviction runs for most of it)
CAP_HEADROOM_BYTES = 64 * 1024
#: share of the newer two fifths of verified pairs (by verification time) that may be absent
#: (evicted) after the run
NEWER_ABSENT_MAX = 0.1


def key_kind(key: bytes) -> str:
    """What a store key holds (:class:`store.keys.KeyLayout`), to count evictions by kind."""
    for part, kind in ((b":p:", "pair"), (b":snap:", "snapshot"), (b":stats:", "stats")):
        if part in key:
            return kind
    return {b"agg": "aggregate", b"nb": "neighbours"}.get(key.rsplit(b":", 1)[-1], "other")


def absent_share_by_age(
    messages: list[Verified], absent: set[tuple[int, int]], parts: int = 5
) -> list[float]:
    """The share of verified pairs absent from the store in each ``parts``-th of the pairs,
    ordered by their last verification (their last write): under ``volatile-ttl`` (every pair
    has the same TTL) eviction takes the oldest write first, approximately (Redis samples)."""
    last: dict[tuple[int, int], int] = {}
    for m in messages:
        for i in m.item_ids:
            last[(m.user_id, i)] = max(m.event_time_ms, last.get((m.user_id, i), 0))
    by_time = sorted(last, key=lambda pair: (last[pair], pair))
    chunks = np.array_split(np.array([p in absent for p in by_time], dtype=float), parts)
    return [round(float(c.mean()), 3) for c in chunks]


def served_tiers_of_verified(
    settings: Settings, ranker: InProcessRanker, present: set[tuple[int, int]]
) -> tuple[int, int, list[tuple[int, int]]]:
    """Look up every verified pair just after the request it was verified for (its newest one),
    with the ranker's reader config: (exact served for stored pairs, stored pairs, evicted pairs
    served as exact). A generous deadline: this checks values, not latency."""
    import dataclasses

    from store.reader import FeatureReader
    from streams.stores import store_from_settings

    config = dataclasses.replace(ranker.service.reader.config, deadline_ms=2_000.0)
    reader = FeatureReader(store_from_settings(settings), config)
    newest: dict[tuple[int, int], int] = {}
    messages = verified_messages(settings)
    for m in messages:
        for i in m.item_ids:
            newest[(m.user_id, i)] = max(m.event_time_ms, newest.get((m.user_id, i), 0))
    exact_ok = stored = 0
    evicted_exact = []
    for m in messages:
        items = [i for i in m.item_ids if newest[(m.user_id, i)] == m.event_time_ms]
        if not items:
            continue
        tiers = reader.lookup(m.user_id, items, m.event_time_ms + 1).tiers
        for item, tier in zip(items, tiers, strict=True):
            if (m.user_id, item) in present:
                stored += 1
                exact_ok += int(tier == Tier.EXACT)
            elif tier == Tier.EXACT:
                evicted_exact.append((m.user_id, item))
    st = reader.stats
    assert st.store_errors == st.timeouts == st.corrupt_values == st.internal_errors == 0, st
    reader.store.close()
    return exact_ok, stored, evicted_exact


#: needs the notification reader (a redis-cli process) to keep up: its unread buffer counts
#: against the cap and cannot be evicted. make test at f63adc0 (load from 3 test processes) saw
#: a snapshot write refused for a minute; alone it passes (433 of 749 pairs evicted, no retry),
#: so it runs with the `timing` tests, and records Redis's memory peaks to say what filled it
@pytest.mark.timing
def test_redis_at_maxmemory_evicts_and_writes_continue(
    dense_traffic: Path, bundle: Path, tmp_path: Path
) -> None:
    """Redis capped at ``maxmemory`` mid-replay with the documented eviction policy: what is
    absent afterwards was evicted, not lost, and what is stored is right."""
    with own_redis(tmp_path / "redis") as rds:
        settings = faulted_settings(bundle, rds)
        admin = rds.client()
        with (
            MemorySampler(rds) as memory,
            EvictionLog(rds, tmp_path / "evicted.csv") as evictions,
        ):
            with live_run(settings, bundle, tmp_path) as (procs, ranker):
                replay = start_replay(settings, dense_traffic, tmp_path)
                time.sleep(REPLAY_WALL_S / 4)
                used = int(admin.info("memory")["used_memory"])
                admin.config_set("maxmemory-policy", EVICTION_POLICY)
                admin.config_set("maxmemory", used + CAP_HEADROOM_BYTES)
                cap = ranker.mark()
                cut = end_offsets(settings, settings.topic("verified"))
                finish(replay, settings, procs)
                ranker.check()
                end = ranker.mark()
                log = procs.log("pipeline") + procs.log("fm")
            # read after the workers stopped: their last writes (stats, neighbours) may evict too
            evicted = int(admin.info("stats")["evicted_keys"])
            peak = int(admin.info("memory")["used_memory_peak"])
        admin.close()
        report = check_nothing_lost(settings, dense_traffic, bundle)
        messages = verified_messages(settings)
        all_pairs = {(m.user_id, i) for m in messages for i in m.item_ids}
        absent = set(report.missing_in_store)
        after_cap = [m for m in messages if m.offset >= cut[m.partition]]
        last = {m.partition: m for m in after_cap}  # newest verified message per partition
        last_absent = {(m.user_id, i) for m in last.values() for i in m.item_ids} & absent
        by_age = absent_share_by_age(messages, absent)
        exact_ok, stored, evicted_exact = served_tiers_of_verified(
            settings, ranker, all_pairs - absent
        )
    st = ranker.service.reader.stats
    layout = KeyLayout(settings.key_prefix)
    absent_keys = {layout.pair(u, i) for u, i in absent}
    verified_keys = {layout.pair(u, i) for u, i in all_pairs}
    print_measured(
        "redis maxmemory",
        {
            "policy": EVICTION_POLICY,
            "maxmemory": used + CAP_HEADROOM_BYTES,
            "used_peak": peak,
            "evicted_keys": evicted,
            "evicted_keys_named": len(evictions.keys),
            "evicted_by_kind": dict(Counter(map(key_kind, evictions.keys))),
            "verified_pairs": len(all_pairs),
            "pairs_evicted": len(absent),
            "embedding_duplicates": report.embedding_duplicates,
            "evicted_pairs_stored_again": len((evictions.keys & verified_keys) - absent_keys),
            "pairs_verified_again": sum(
                n > 1
                for n in Counter((m.user_id, i) for m in messages for i in m.item_ids).values()
            ),
            "evicted_pair_keys_not_verified": len(
                {k for k in evictions.keys if key_kind(k) == "pair"} - verified_keys
            ),
            "absent_share_oldest_to_newest_fifth": by_age,
            "newest_pairs": sum(len(m.item_ids) for m in last.values()),
            "newest_pairs_absent": len(last_absent),
            "aggregates_stored": report.aggregates,
            "aggregates_absent": len(report.aggregates_absent),
            "only_live": len(report.only_live),
            "only_simulated": len(report.only_simulated),
            "verified_twice": report.verified_duplicates,
            "served_share_after_cap": end.served_share_since(cap),
            "ranker_store_errors": st.store_errors,
            "ranker_timeouts": st.timeouts,
            "write_retries_logged": log.count("store write failed; retrying"),
            "stored_pairs_served_exact": f"{exact_ok}/{stored}",
            "evicted_pairs_served_exact": len(evicted_exact),
            "memory_peaks": memory.peaks,
            "memory_polls": memory.polls,
        },
    )
    assert evicted > 0 and absent, "the cap never made Redis evict a pair"
    assert len(evictions.keys) <= evicted  # the log names keys the server counted as evicted
    assert absent_keys <= evictions.keys, f"pairs lost, not evicted: {absent_keys - evictions.keys}"
    retries = [line for line in log.splitlines() if "store write failed; retrying" in line]
    # no OOM error reached a writer (the peaks say whether keys or client buffers filled the cap)
    assert not retries, f"{len(retries)} write retries, peaks {memory.peaks}: {retries[:3]}"
    # writes go on after the cap and eviction takes the oldest writes first, approximately:
    # Redis picks the key nearest to expiry from a sample and scores a sampled key once, so a
    # pair verified again (110 of 749 in one run) can be evicted by its first write's TTL just
    # after it was written anew. make test at 36365d6 saw 1 of the 4 pairs verified last
    # evicted. By last write, 6 runs alone: 0-0.02 of each newer fifth absent, 0.45-0.88 of the
    # oldest two. volatile-random left 0.27 and 0.12 of the newer two absent (fails here)
    assert after_cap, "nothing was verified after the cap"
    newer, older = float(np.mean(by_age[3:])), float(np.mean(by_age[:3]))
    assert newer <= NEWER_ABSENT_MAX and newer < older, f"absent by age, oldest first: {by_age}"
    assert st.store_errors == 0 and st.corrupt_values == 0  # eviction is not an error
    assert not evicted_exact, evicted_exact  # an evicted pair reads missing (a lower tier)
    assert exact_ok == stored > 0  # every pair still stored is served exact
    assert not report.missing_in_embeddings and not report.stale_in_store
    assert report.vectors_checked and not report.wrong_vectors, report.wrong_vectors[:3]
    # aggregates (24 h TTL) go after the oldest pairs (4 h) under volatile-ttl, but eviction
    # samples keys, so one may go too: each one still stored equals the one folded from the
    # run's embeddings and has the simulator's count and time; an absent one was evicted
    assert report.aggregates > 0, "every aggregate was evicted"
    assert not report.aggregate_mismatch, report.aggregate_mismatch[:3]
    assert not report.aggregate_vs_simulator, report.aggregate_vs_simulator[:3]
    absent_aggs = {layout.aggregate(u) for u in report.aggregates_absent}
    assert {k.decode() for k in absent_aggs} == set(report.aggregates_absent_vs_simulator)
    assert absent_aggs <= evictions.keys, f"aggregates lost: {absent_aggs - evictions.keys}"
    assert not report.only_live and not report.only_simulated  # Redis never steers the pipeline
    assert not report.verified_twice, report.verified_twice[:3]
