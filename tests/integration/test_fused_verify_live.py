"""``SOLARIS_FUSE_VERIFY`` on the real broker + Redis: the speculate agent verifies its own
batches (no ``speculated`` hop) and the ranker still reads what the simulator computes.

A lockstep replay of the parity traffic (the pipeline drains before each request), compared by
values: the history of every verified pair, every exact pair vector, aggregate, FM state and
stored history; and ``speculated`` must stay empty.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from models.data.traffic import read_traffic
from streams.lag import LagReader
from streams.replay import replay_file
from tests.integration.live_harness import (
    PARITY_READ_DEADLINE_MS,
    fresh_live_settings,
    pipeline,
    read_topic,
    wait_drained,
)
from tests.integration.value_parity import assert_live_values_equal, live_values, simulated_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_fused_verify_live_values_equal_simulator(
    traffic: Path, bundle: Path, tmp_path: Path
) -> None:
    settings = fresh_live_settings(
        bundle, partitions=4, read_deadline_ms=PARITY_READ_DEADLINE_MS, fuse_verify=True
    )
    with pipeline(settings, tmp_path, ranker=False) as procs:
        reader = LagReader(settings)
        topics = [settings.topic(t) for t in ("requests", "impressions", "verified", "embeddings")]

        def lockstep() -> None:
            procs.alive()
            assert reader.wait_drained(reader.groups(), topics, timeout_s=60), "drain timed out"

        replay = replay_file(settings, traffic, speed=0.0, lockstep=lockstep)
        wait_drained(settings, procs)
        reader.close()
        time.sleep(0.5)
    assert replay.requests > 50
    assert read_topic(settings, settings.topic("speculated")) == []
    offline = simulated_for(settings, bundle, read_traffic(traffic))
    assert_live_values_equal(live_values(settings), offline)
