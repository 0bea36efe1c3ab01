"""Live pipeline on the real broker + Redis: parity with the simulator, and bad input.

One lockstep replay (the pipeline drains before each request, so it processes traffic in the
simulator's order) with a burst of malformed messages sent first. The coverage by tier must
equal the simulator's on the same traffic for the exact and aggregate tiers; the neighbour tier
may differ slightly because the ranker reloads the workers' KNN snapshots on a wall-clock
schedule (every 2 s) rather than at the event time they were built (documented in README).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from schemas.codec import Codec
from schemas.limits import Limits
from schemas.records import DeadLetter, ImpressionEvent, ProposalBatch, RequestEvent
from streams.settings import Settings
from tests.integration.live_harness import (
    TINY_TRAIN,
    pipeline,
    raw_encode,
    read_topic,
    wait_drained,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T0 = 1_704_067_200_000


def live_settings(base: Settings, unique: str, bundle: Path) -> Settings:
    return base.model_copy(
        update={
            "topic_prefix": f"t{unique}",
            "key_prefix": f"t{unique}",
            "topic_partitions": 2,
            "bundle_dir": bundle,
            "embedding_dim": TINY_TRAIN.embedding_dim,
            "history_len": TINY_TRAIN.history_len,
            "faust_commit_interval_s": 0.1,
        }
    )


def bad_messages() -> dict[str, list[tuple[bytes, str]]]:
    """topic -> [(value, expected dead-letter reason)]."""
    codec = Codec()
    big = Codec(Limits(max_candidates=100_000))
    return {
        "requests": [
            (b"\xff\xfenot avro at all", "bad_header"),
            (b"\x00\x00\x00\x00\x01\xff\xff\xff\xff", "decode_error"),
            (b"\x00\x00\x00\x03\xe7whatever", "unknown_schema"),
            (big.encode(RequestEvent("big", 1, T0, "feed", tuple(range(2_000)))), "invalid_field"),
            (codec.encode(ImpressionEvent("r", 1, 2, T0, 0, 1)), "wrong_record_type"),
        ],
        "impressions": [
            (raw_encode(ImpressionEvent("r", 1, 2, T0, 0, 7)), "invalid_field"),
            (b"", "bad_header"),
        ],
        "speculated": [
            (
                raw_encode(ProposalBatch("r", 1, T0, 2, (5, 6), ("c", "c"), (math.nan, 0.5))),
                "invalid_field",
            ),
        ],
    }


@pytest.fixture(scope="module")
def live_run(
    traffic: Path, bundle: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Run the pipeline once; the tests below assert on what it produced."""
    import uuid

    from models.data.traffic import read_traffic
    from streams.lag import LagReader
    from streams.live.report import live_summary
    from streams.replay import replay_file
    from tests.conftest import require_kafka_and_redis

    base = Settings()
    require_kafka_and_redis(base)
    settings = live_settings(base, uuid.uuid4().hex[:10], bundle)
    log_dir = tmp_path_factory.mktemp("live")
    sent = bad_messages()
    with pipeline(settings, log_dir) as procs:
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
        for topic, msgs in sent.items():
            for value, _ in msgs:
                producer.produce(settings.topic(topic), key=b"1", value=value)
        producer.flush(10)
        reader = LagReader(settings)
        topics = [
            settings.topic(t)
            for t in ("requests", "impressions", "speculated", "verified", "embeddings")
        ]

        def lockstep() -> None:
            procs.alive()
            assert reader.wait_drained(reader.groups(), topics, timeout_s=60), (
                "lockstep drain timed out"
            )

        replay = replay_file(settings, traffic, speed=0.0, lockstep=lockstep)
        wait_drained(settings, procs)
        reader.close()
        time.sleep(1.5)  # workers flush their shared counters once a second
        procs.stop_all()  # the ranker publishes its final counters on exit
    time.sleep(0.5)
    dead = [
        Codec().decode(v, DeadLetter)
        for _, v in read_topic(settings, settings.topic("dead-letter"))
    ]
    return {
        "settings": settings,
        "summary": live_summary(settings),
        "dead": dead,
        "sent": sent,
        "replay": replay,
        "events": lambda: read_traffic(traffic),
        "log_dir": log_dir,
    }


def test_live_coverage_equals_simulator(live_run: dict[str, Any], bundle: Path) -> None:
    from streams.models_loader import load_models
    from streams.simulate.config import sim_config_from_settings
    from streams.simulate.run import simulate

    settings = live_run["settings"]
    models, _ = load_models(settings, bundle)
    offline = simulate(
        live_run["events"],
        sim_config_from_settings(settings, models.fm.dim),
        models,
        with_random=False,
    )
    live = live_run["summary"]
    assert live["requests"] == offline["requests"] == live_run["replay"].requests
    assert live["lookups"] == offline["lookups"]
    assert live["coverage"]["exact"] == pytest.approx(offline["coverage"]["exact"], abs=1e-9)
    assert live["coverage"]["aggregate"] == pytest.approx(
        offline["coverage"]["aggregate"], abs=1e-9
    )
    assert live["cumulative"]["with_neighbours"] == pytest.approx(
        offline["cumulative"]["with_neighbours"], abs=0.05
    )
    assert live["fm_pairs"] == offline["fm_pairs"]
    assert offline["cumulative"]["exact"] > 0.05  # the run actually covered something


def test_malformed_messages_land_in_dead_letter_topic_with_reasons(
    live_run: dict[str, Any],
) -> None:
    settings, sent, dead = live_run["settings"], live_run["sent"], live_run["dead"]
    expected = sorted((settings.topic(t), reason) for t, msgs in sent.items() for _, reason in msgs)
    got = sorted((d.source_topic, d.reason) for d in dead)
    assert got == expected
    by_value = {d.raw_value for d in dead}
    assert all(v in by_value or v == b"" for msgs in sent.values() for v, _ in msgs)
    assert all(d.offset >= 0 and d.partition >= 0 and d.error for d in dead)
    assert live_run["summary"]["dead_letters"] == {
        reason: sum(1 for _, r in expected if r == reason) for reason in {r for _, r in expected}
    }
