"""A pipeline worker replaced mid-replay by one with no local state keeps the simulator's pairs.

Lockstep replay (every group drains before each request). Halfway through, the pipeline worker
is stopped and a new one starts in an empty state dir, so it rebuilds every table (ledger,
history, aggregates, representations and the pair memories of ``recent``) from the changelogs.
The default ``recurrence`` ranking reads the user's pair memory and the item prior, which
counts the lists all pair memories hold: the new worker rebuilds it from the ``recent`` table,
so every input of the verify step's choice comes back from the tables. The pairs it keeps, and
with them the histories attached to the verified pairs, the pair vectors and the aggregates in
Redis, must be byte-identical to the simulator's on the same traffic. (Until 2026-12-07 the item
prior was a count of every list the process had seen, which a new process started from nothing:
this test then failed with ``recurrence`` and ran with ``pair``.)
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bench.scale_out import recovered
from streams.lag import LagReader
from streams.settings import Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import STATELESS_RANKING, fault_pipeline, wait_for
from tests.integration.live_harness import live_settings, wait_drained

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIVE_TOPICS = ("requests", "impressions", "speculated", "verified", "embeddings")


def test_a_replaced_pipeline_worker_keeps_the_simulators_pairs(
    traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    """``traffic_faults``: users come back within minutes, so the pair memories the new worker
    reads back decide which pairs it keeps."""
    from models.data.traffic import read_traffic
    from streams.replay import replay_file
    from tests.integration.value_parity import (
        assert_live_values_equal,
        live_values,
        simulated_for,
    )

    base = Settings()
    require_kafka_and_redis(base)
    # a tight budget, so that the ranking decides which proposals are kept (at the default
    # half of the candidates, a returning user's few new proposals are all kept in any order)
    ranking = {**STATELESS_RANKING, "verifier_rank_by": "recurrence", "verifier_top_fraction": 0.1}
    settings = live_settings(base, uuid.uuid4().hex[:10], bundle, **ranking)
    requests = sum(1 for e in read_traffic(traffic_faults) if hasattr(e, "candidates"))
    replaced_at = requests // 2
    with fault_pipeline(settings, tmp_path) as procs:
        reader = LagReader(settings)
        topics = [settings.topic(t) for t in LIVE_TOPICS]
        seen = 0

        def lockstep() -> None:
            nonlocal seen
            procs.alive()
            assert reader.wait_drained(reader.groups(), topics, timeout_s=60), "drain timed out"
            seen += 1
            if seen == replaced_at:
                procs.stop("pipeline")  # everything so far is processed and committed
                procs.start_pipeline_worker("pipeline-new", data_dir=tmp_path / "empty-state")
                wait_for(
                    "the new pipeline worker to recover its tables",
                    lambda: procs.alive() is None and recovered(procs.log("pipeline-new")),
                    timeout_s=180,
                )

        try:
            replay_file(settings, traffic_faults, speed=0.0, lockstep=lockstep)
            wait_drained(settings, procs)
        finally:
            reader.close()
        assert seen > replaced_at, "the worker was never replaced"
        live = live_values(settings)
    offline = simulated_for(settings, bundle, read_traffic(traffic_faults))
    assert_live_values_equal(live, offline)
