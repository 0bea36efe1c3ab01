"""One live lockstep run with the store on a 3-master Redis Cluster, checked against the simulator.

Pipeline worker, FM worker and ranker run as child processes with
``SOLARIS_STORE_BACKEND=redis-cluster`` and ``SOLARIS_STORE_URL`` naming one node of the local
cluster (started through ``infra/redis.sh cluster-start``, see test_store_redis_cluster). The
replay is lockstep (the pipeline drains before each request), so the values in the cluster are
expected to equal the simulator's on the same traffic: the history of every verified pair, every
exact pair vector and every user aggregate; and the tiers the ranker served (read back from its
``scores`` topic) give the simulator's exact and aggregate coverage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from redis.cluster import RedisCluster

from schemas.codec import Codec
from schemas.limits import Limits
from schemas.records import ProposalBatch
from store.tiers import Tier
from streams.settings import Settings
from tests.integration.live_harness import (
    fresh_live_settings,
    pipeline,
    read_topic,
    wait_drained,
)
from tests.integration.test_store_redis_cluster import delete_prefix, local_cluster
from tests.integration.value_parity import History, PairKey, Values

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIVE_TOPICS = ("requests", "impressions", "speculated", "verified", "embeddings")


def cluster_values(settings: Settings, url: str) -> tuple[Values, Counter[str]]:
    """Histories from the ``verified`` topic, stored values from every master, and how many of
    the run's keys each master holds."""
    codec = Codec(Limits(max_candidates=settings.max_candidates))
    histories: dict[PairKey, History] = {}
    for _, value in read_topic(settings, settings.topic("verified")):
        b = codec.decode(value, ProposalBatch)
        hist = (tuple(b.history_items), tuple(b.history_labels), tuple(b.history_times_ms))
        for item in b.item_ids:
            histories[(b.user_id, item, b.event_time_ms)] = hist
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
            histories,
            {k: v for k, v in values.items() if b":p:" in k},
            {k: v for k, v in values.items() if k.endswith(b":agg")},
        ),
        per_node,
    )


@pytest.fixture(scope="module")
def cluster_run(
    traffic: Path, bundle: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    from streams.lag import LagReader
    from streams.live.quality import read_scores
    from streams.replay import replay_file

    with local_cluster() as url, pytest.MonkeyPatch.context() as env:
        # the child processes take their settings from the environment
        env.setenv("SOLARIS_STORE_BACKEND", "redis-cluster")
        env.setenv("SOLARIS_STORE_URL", url)
        settings = fresh_live_settings(bundle, store_backend="redis-cluster", store_url=url)
        try:
            with pipeline(settings, tmp_path_factory.mktemp("live-cluster")) as procs:
                lag = LagReader(settings)
                topics = [settings.topic(t) for t in LIVE_TOPICS]

                def lockstep() -> None:
                    procs.alive()
                    assert lag.wait_drained(lag.groups(), topics, timeout_s=60), "drain timed out"

                replay = replay_file(settings, traffic, speed=0.0, lockstep=lockstep)
                wait_drained(settings, procs)
                lag.close()
            values, per_node = cluster_values(settings, url)
            from streams.live.report import live_summary

            summary = live_summary(settings)  # the shared counters, on the cluster too
            yield {
                "summary": summary,
                "settings": settings,
                "traffic": traffic,
                "replay": replay,
                "values": values,
                "per_node": per_node,
                "scores": read_scores(settings),
            }
        finally:
            delete_prefix(url, settings.key_prefix)


def test_cluster_values_equal_simulator(cluster_run: dict[str, Any], bundle: Path) -> None:
    from models.data.traffic import read_traffic
    from tests.integration.value_parity import compare_vectors, simulated_for

    settings = cluster_run["settings"]
    offline = simulated_for(settings, bundle, read_traffic(cluster_run["traffic"]))
    live = cluster_run["values"]
    print(f"keys per master: {dict(cluster_run['per_node'])}")
    assert len(cluster_run["per_node"]) >= 2, "the run's keys did not spread over the masters"
    assert live.histories == offline.histories
    for name, got, want in (
        ("pairs", live.pairs, offline.pairs),
        ("aggregates", live.aggregates, offline.aggregates),
    ):
        diff = compare_vectors(got, want)
        print(f"{name}: {len(want)} keys, {diff.equal_bytes} byte-identical")
        assert not diff.only_left and not diff.only_right, (
            f"{name}: {len(diff.only_left)} only live, {len(diff.only_right)} only simulated"
        )
        assert not diff.header_mismatch, f"{name}: headers differ for {diff.header_mismatch[:3]}"
        assert diff.max_abs_delta <= 2e-3, f"{name}: max |delta| {diff.max_abs_delta}"
        assert len(want) >= 5


def test_ranker_served_the_simulators_exact_and_aggregate_coverage(
    cluster_run: dict[str, Any], bundle: Path
) -> None:
    """The ranker's FeatureReader read the cluster: its served tiers give offline coverage."""
    from models.data.traffic import read_traffic
    from streams.models_loader import load_models
    from streams.simulate.config import sim_config_from_settings
    from streams.simulate.run import simulate

    settings = cluster_run["settings"]
    models, _ = load_models(settings, bundle)
    offline = simulate(
        lambda: read_traffic(cluster_run["traffic"]),
        sim_config_from_settings(settings, models.fm.dim),
        models,
        with_random=False,
    )
    scores = cluster_run["scores"]
    tiers = np.concatenate([s.tiers for s in scores.values()])
    assert len(scores) == offline["requests"] == cluster_run["replay"].requests
    assert tiers.size == offline["lookups"]
    live = {
        "exact": float(np.mean(tiers == Tier.EXACT)),
        "aggregate": float(np.mean(tiers == Tier.AGGREGATE)),
    }
    print(f"served on the cluster: {live}; simulator: {offline['coverage']}")
    assert live["exact"] == pytest.approx(offline["coverage"]["exact"], abs=1e-9)
    assert live["aggregate"] == pytest.approx(offline["coverage"]["aggregate"], abs=1e-9)
    assert live["exact"] > 0.05
    # `solaris coverage` / the demo table read the same shares from the shared counters
    summary = cluster_run["summary"]
    assert summary["requests"] == cluster_run["replay"].requests
    assert summary["coverage"]["exact"] == pytest.approx(live["exact"], abs=1e-9)
    assert summary["fm_pairs"] >= len(cluster_run["values"].pairs) > 0
