"""Fault matrix, Redis at ``maxmemory``: the live pipeline on its own redis-server, capped
mid-replay with the eviction policy docs/live-pipeline.md documents (``volatile-ttl``).

Set up as ``test_faults_redis.py`` (a private Redis, the workers as processes, the ranker on a
thread of this process, a timed replay). Writes never fail, evicted pairs read *missing*,
eviction takes the oldest writes first (approximately), every pair or aggregate absent
afterwards was evicted (named by a keyspace notification) and every aggregate still stored is
the folded and the simulator's.
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
from tests.integration.fault_harness import print_measured
from tests.integration.nothing_lost import check_nothing_lost
from tests.integration.redis_fault_helpers import (
    REPLAY_WALL_S,
    EvictionLog,
    InProcessRanker,
    MemorySampler,
    Verified,
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


@pytest.fixture(scope="module")
def dense_traffic() -> Path:
    return dense_traffic_file()


#: the eviction policy docs/live-pipeline.md documents for the store ("Fault matrix"): every value
#: pipeline writes has a TTL, so ``volatile-ttl`` evicts the values nearest to expiry first —
#: the oldest pair embeddings (4 h TTL) before aggregates and neighbour lists (24 h) — and never
#: the stats hashes (no TTL). The Redis default, ``noeviction``, fails every write instead.
EVICTION_POLICY = "volatile-ttl"
#: memory allowed above what Redis used when the cap is set (a fraction of what the rest of the
#: replay writes, so eviction runs for most of it)
CAP_HEADROOM_BYTES = 64 * 1024
#: share of the newer two fifths of verified pairs (by last verification) that may be absent
#: (evicted) after the run
NEWER_ABSENT_MAX = 0.1


def key_kind(key: bytes) -> str:
    """What a store key holds (:class:`store.keys.KeyLayout`), to count evictions by kind."""
    for part, kind in ((b":p:", "pair"), (b":snap:", "snapshot"), (b":stats:", "stats")):
        if part in key:
            return kind
    return {b"agg": "aggregate", b"nb": "neighbours"}.get(key.rsplit(b":", 1)[-1], "other")


def last_verified(messages: list[Verified]) -> dict[tuple[int, int], int]:
    """Each verified pair's newest verification time: its last write to the store."""
    last: dict[tuple[int, int], int] = {}
    for m in messages:
        for i in m.item_ids:
            last[(m.user_id, i)] = max(m.event_time_ms, last.get((m.user_id, i), 0))
    return last


def absent_share_by_age(
    messages: list[Verified], absent: set[tuple[int, int]], parts: int = 5
) -> list[float]:
    """The share of verified pairs absent from the store in each ``parts``-th of the pairs,
    ordered by their last verification (their last write): under ``volatile-ttl`` (every pair
    has the same TTL) eviction takes the oldest write first, approximately (Redis samples)."""
    last = last_verified(messages)
    by_time = sorted(last, key=lambda pair: (last[pair], pair))
    chunks = np.array_split(np.array([p in absent for p in by_time], dtype=float), parts)
    return [round(float(c.mean()), 3) for c in chunks]


def served_tiers_of_verified(
    settings: Settings,
    ranker: InProcessRanker,
    messages: list[Verified],
    present: set[tuple[int, int]],
) -> tuple[int, int, list[tuple[int, int]]]:
    """Look up every verified pair just after the request it was verified for (its newest one),
    with the ranker's reader config: (exact served for stored pairs, stored pairs, evicted pairs
    served as exact). A generous deadline: this checks values, not latency."""
    import dataclasses

    from store.reader import FeatureReader
    from streams.stores import store_from_settings

    config = dataclasses.replace(ranker.service.reader.config, deadline_ms=2_000.0)
    reader = FeatureReader(store_from_settings(settings), config)
    newest = last_verified(messages)
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
            settings, ranker, messages, all_pairs - absent
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
