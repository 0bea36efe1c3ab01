"""One live lockstep run with the store on a 3-master Redis Cluster, checked against the simulator.

Pipeline worker, FM worker and ranker run as child processes with
``SOLARIS_STORE_BACKEND=redis-cluster`` and ``SOLARIS_STORE_URL`` naming one node of the local
cluster (started through ``infra/redis.sh cluster-start``, see test_store_redis_cluster). The
replay is lockstep (the pipeline drains before each request), so the values in the cluster are
expected to equal the simulator's on the same traffic: the history of every verified pair, every
exact pair vector and every user aggregate; and the tiers the ranker served (read back from its
``scores`` topic) give the simulator's exact and aggregate coverage.

The run and the checks are backend-neutral functions (:func:`lockstep_run`,
:func:`read_back_values`, :func:`check_values_equal_simulator`,
:func:`check_served_coverage_equals_simulator`) shared with test_live_aerospike, which cannot
run without an Aerospike server: here they run on the cluster, and the read-back through the
``FeatureStore`` protocol (all the Aerospike test can use: its keys cannot be listed) is checked
against a scan of every master.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from redis.cluster import RedisCluster

from schemas.codec import Codec
from schemas.limits import Limits
from schemas.records import ProposalBatch
from store.keys import KeyLayout
from store.protocol import FeatureStore, ReadBatch
from store.tiers import Tier
from streams.settings import Settings
from tests.integration.live_harness import (
    PARITY_READ_DEADLINE_MS,
    fresh_live_settings,
    pipeline,
    read_topic,
    wait_drained,
)
from tests.integration.test_store_redis_cluster import delete_prefix, local_cluster
from tests.integration.value_parity import History, PairKey, Values

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIVE_TOPICS = ("requests", "impressions", "speculated", "verified", "embeddings")
#: keys per read-back round trip (a live lookup reads 500 pairs)
READ_BACK_CHUNK = 500


# --- shared with test_live_aerospike: the run and its checks, for any store backend ----------


def parity_settings(bundle: Path, **backend: Any) -> Settings:
    """Settings of one parity run on a store backend: a fresh prefix, and a read deadline no
    loaded test machine misses (a missed read serves a lower tier: coverage would differ)."""
    return fresh_live_settings(bundle, read_deadline_ms=PARITY_READ_DEADLINE_MS, **backend)


def backend_env(settings: Settings) -> dict[str, str]:
    """What the child processes need beyond ``live_harness.env_for`` to use this store."""
    return {
        "SOLARIS_STORE_BACKEND": settings.store_backend,
        "SOLARIS_STORE_URL": settings.store_url,
        "SOLARIS_AEROSPIKE_HOSTS": settings.aerospike_hosts,
        "SOLARIS_AEROSPIKE_NAMESPACE": settings.aerospike_namespace,
        "SOLARIS_READ_DEADLINE_MS": str(settings.read_deadline_ms),
    }


def lockstep_run(settings: Settings, traffic: Path, log_dir: Path) -> dict[str, Any]:
    """Replay ``traffic`` in lockstep through pipeline + FM worker + ranker child processes on
    ``settings``' store; what the run produced once they stopped."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in backend_env(settings).items():
            env.setenv(key, value)  # the child processes take their settings from here
        return _replay(settings, traffic, log_dir)


def _replay(settings: Settings, traffic: Path, log_dir: Path) -> dict[str, Any]:
    from streams.lag import LagReader
    from streams.live.quality import read_scores
    from streams.live.report import live_summary
    from streams.replay import replay_file

    with pipeline(settings, log_dir) as procs:
        lag = LagReader(settings)
        topics = [settings.topic(t) for t in LIVE_TOPICS]

        def lockstep() -> None:
            procs.alive()
            assert lag.wait_drained(lag.groups(), topics, timeout_s=60), "drain timed out"

        replay = replay_file(settings, traffic, speed=0.0, lockstep=lockstep)
        wait_drained(settings, procs)
        lag.close()
    return {
        "settings": settings,
        "traffic": traffic,
        "replay": replay,
        "summary": live_summary(settings),  # the shared counters (the ranker's on every backend)
        "scores": read_scores(settings),
        "histories": verified_histories(settings),
    }


def verified_histories(settings: Settings) -> dict[PairKey, History]:
    """The history each verified pair was sent to the FM with (from the ``verified`` topic)."""
    codec = Codec(Limits(max_candidates=settings.max_candidates))
    histories: dict[PairKey, History] = {}
    for _, value in read_topic(settings, settings.topic("verified")):
        b = codec.decode(value, ProposalBatch)
        hist = (tuple(b.history_items), tuple(b.history_labels), tuple(b.history_times_ms))
        for item in b.item_ids:
            histories[(b.user_id, item, b.event_time_ms)] = hist
    return histories


def read_back(
    store: FeatureStore, layout: KeyLayout, pairs: Iterable[tuple[int, int]], users: Iterable[int]
) -> tuple[dict[bytes, bytes], dict[bytes, bytes], dict[bytes, bytes], dict[bytes, bytes]]:
    """The stored pair, aggregate, history and state values of these keys, read through the
    ``FeatureStore`` protocol (works on every backend) and keyed by the Redis key layout; absent
    keys left out."""
    pair_list, user_list = sorted(set(pairs)), sorted(set(users))
    found_pairs: dict[bytes, bytes] = {}
    for start in range(0, len(pair_list), READ_BACK_CHUNK):
        chunk = pair_list[start : start + READ_BACK_CHUNK]
        got = store.read(ReadBatch(pairs=chunk), timeout_ms=5_000).pairs
        found_pairs.update(
            (layout.pair(u, i), v) for (u, i), v in zip(chunk, got, strict=True) if v is not None
        )
    found_aggs: dict[bytes, bytes] = {}
    found_hists: dict[bytes, bytes] = {}
    found_states: dict[bytes, bytes] = {}
    for start in range(0, len(user_list), READ_BACK_CHUNK):
        chunk_users = user_list[start : start + READ_BACK_CHUNK]
        got_users = store.read(
            ReadBatch(aggregates=chunk_users, histories=chunk_users, states=chunk_users),
            timeout_ms=5_000,
        )
        found_aggs.update(
            (layout.aggregate(u), v)
            for u, v in zip(chunk_users, got_users.aggregates, strict=True)
            if v is not None
        )
        found_hists.update(
            (layout.history(u), v)
            for u, v in zip(chunk_users, got_users.histories, strict=True)
            if v is not None
        )
        found_states.update(
            (layout.state(u), v)
            for u, v in zip(chunk_users, got_users.states, strict=True)
            if v is not None
        )
    return found_pairs, found_aggs, found_hists, found_states


def read_back_values(run: dict[str, Any]) -> Values:
    """The run's values read through the configured store: every verified pair, every user of
    the traffic's aggregate."""
    from models.data.traffic import read_traffic
    from streams.stores import store_from_settings

    settings = run["settings"]
    store = store_from_settings(settings)
    try:
        pairs, aggs, hists, states = read_back(
            store,
            KeyLayout(settings.key_prefix),
            ((u, i) for u, i, _ in run["histories"]),
            (e.user_id for e in read_traffic(run["traffic"])),
        )
    finally:
        store.close()
    return Values(run["histories"], pairs, aggs, hists, states)


def check_values_equal_simulator(run: dict[str, Any], live: Values, bundle: Path) -> None:
    """Histories, pair vectors and aggregates of the live run equal the simulator's."""
    from models.data.traffic import read_traffic
    from tests.integration.value_parity import compare_vectors, simulated_for

    offline = simulated_for(run["settings"], bundle, read_traffic(run["traffic"]))
    assert live.histories == offline.histories
    for name, got, want in (
        ("pairs", live.pairs, offline.pairs),
        ("aggregates", live.aggregates, offline.aggregates),
        ("states", live.states, offline.states),
    ):
        diff = compare_vectors(got, want)
        print(f"{name}: {len(want)} keys, {diff.equal_bytes} byte-identical")
        assert not diff.only_left and not diff.only_right, (
            f"{name}: {len(diff.only_left)} only live, {len(diff.only_right)} only simulated"
        )
        assert not diff.header_mismatch, f"{name}: headers differ for {diff.header_mismatch[:3]}"
        assert diff.max_abs_delta <= 2e-3, f"{name}: max |delta| {diff.max_abs_delta}"
        assert len(want) >= 5
    # each user's stored history (the fair vm_solaris's features), byte for byte
    assert live.user_histories == offline.user_histories and len(offline.user_histories) >= 5


def check_served_coverage_equals_simulator(run: dict[str, Any], bundle: Path) -> None:
    """The ranker's FeatureReader read the store: its served tiers give offline coverage, and
    `solaris coverage` (the shared counters) reports the same shares."""
    from models.data.traffic import read_traffic
    from streams.live.stats import STATS_BACKENDS
    from streams.models_loader import load_models
    from streams.simulate.config import sim_config_from_settings
    from streams.simulate.run import simulate

    settings = run["settings"]
    models, _ = load_models(settings, bundle)
    offline = simulate(
        lambda: read_traffic(run["traffic"]),
        sim_config_from_settings(settings, models.fm.dim),
        models,
        with_random=False,
    )
    missed = (run["summary"]["reader_timeouts"], run["summary"]["reader_store_errors"])
    assert missed == (0, 0), f"ranker reads missed (timeouts, store errors): {missed}"
    scores = run["scores"]
    tiers = np.concatenate([s.tiers for s in scores.values()])
    assert len(scores) == offline["requests"] == run["replay"].requests
    assert tiers.size == offline["lookups"]
    live = {
        "exact": float(np.mean(tiers == Tier.EXACT)),
        "aggregate": float(np.mean(tiers == Tier.AGGREGATE)),
        "state": float(np.mean(tiers == Tier.STATE)),
    }
    print(f"served on {settings.store_backend}: {live}; simulator: {offline['coverage']}")
    assert live["exact"] == pytest.approx(offline["coverage"]["exact"], abs=1e-9)
    assert live["aggregate"] == pytest.approx(offline["coverage"]["aggregate"], abs=1e-9)
    # exact too: the live ranker and the pipeline take the same request concurrently; when the
    # FM worker stores this request's state first, the state key still holds the previous one
    # (store.state_slots), which the lookup serves, as the simulator does (with one slot CI
    # served 0.2658 live vs 0.2708 simulated)
    assert live["state"] > 0
    assert live["state"] == pytest.approx(offline["coverage"]["state"], abs=1e-9)
    assert live["exact"] > 0.05
    summary = run["summary"]
    assert summary["requests"] == run["replay"].requests
    assert summary["coverage"]["exact"] == pytest.approx(live["exact"], abs=1e-9)
    if settings.store_backend in STATS_BACKENDS:  # else the workers keep no shared counters
        assert summary["fm_pairs"] >= len(run["histories"]) > 0


# --- the Redis Cluster run ----------------------------------------------------------------


def cluster_values(url: str, run: dict[str, Any]) -> tuple[Values, Counter[str]]:
    """Every stored value of the run, scanned from every master, and how many of the run's keys
    each master holds."""
    settings = run["settings"]
    client = RedisCluster.from_url(url)
    try:
        keys = sorted(client.scan_iter(match=f"{settings.key_prefix}:*", count=1000))
        raw = client.mget_nonatomic(keys) if keys else []
        per_node = Counter(client.get_node_from_key(k).name for k in keys)
    finally:
        client.close()
    values: dict[bytes, bytes] = {k: v for k, v in zip(keys, raw, strict=True) if v is not None}
    return (
        Values(
            run["histories"],
            {k: v for k, v in values.items() if b":p:" in k},
            {k: v for k, v in values.items() if k.endswith(b":agg")},
            {k: v for k, v in values.items() if k.endswith(b":h")},
            {k: v for k, v in values.items() if k.endswith(b":st")},
        ),
        per_node,
    )


@pytest.fixture(scope="module")
def cluster_run(
    traffic: Path, bundle: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    with local_cluster() as url:
        settings = parity_settings(bundle, store_backend="redis-cluster", store_url=url)
        try:
            run = lockstep_run(settings, traffic, tmp_path_factory.mktemp("live-cluster"))
            run["values"], run["per_node"] = cluster_values(url, run)
            run["read_back"] = read_back_values(run)
            yield run
        finally:
            delete_prefix(url, settings.key_prefix)


def test_cluster_values_equal_simulator(cluster_run: dict[str, Any], bundle: Path) -> None:
    print(f"keys per master: {dict(cluster_run['per_node'])}")
    assert len(cluster_run["per_node"]) >= 2, "the run's keys did not spread over the masters"
    check_values_equal_simulator(cluster_run, cluster_run["values"], bundle)


def test_read_back_through_the_store_finds_every_stored_value(
    cluster_run: dict[str, Any],
) -> None:
    """What test_live_aerospike compares: the protocol read-back of the verified pairs and the
    traffic's users is exactly what a scan of every master finds."""
    scanned, read = cluster_run["values"], cluster_run["read_back"]
    assert read.pairs == scanned.pairs
    assert read.aggregates == scanned.aggregates
    assert read.states == scanned.states
    assert len(read.pairs) > 0 and len(read.aggregates) > 0


def test_ranker_served_the_simulators_exact_and_aggregate_coverage(
    cluster_run: dict[str, Any], bundle: Path
) -> None:
    check_served_coverage_equals_simulator(cluster_run, bundle)
    assert cluster_run["summary"]["fm_pairs"] >= len(cluster_run["values"].pairs) > 0
