"""Issue 24's reproduction: a 1.04 MB undecodable request among 200 valid ones (real broker).

Before: the dead letter of the big request was larger than librdkafka's 1,000,000-byte limit,
its send failed (``MSG_SIZE_TOO_LARGE``), the agent crashed and Faust acked the batch it was
in: 156 of 200 valid requests reached ``speculated`` and no dead letter was written. Now the dead
letter keeps a bounded prefix with the original size and hash, and every valid request is
speculated.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from schemas.codec import Codec
from schemas.records import DeadLetter, ProposalBatch, RequestEvent
from streams.kafka_clients import make_producer
from streams.live.dead_letters import MAX_RAW_VALUE_BYTES
from tests.integration.live_harness import Procs, fresh_live_settings, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T0 = 1_704_067_200_000
#: under the broker's default message.max.bytes (1,048,588) with key and framing
BIG = 1_040_000


def test_a_near_limit_poison_request_costs_only_itself(bundle: Path, tmp_path: Path) -> None:
    from streams.lag import wait_for_groups
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    procs = Procs(settings, tmp_path)
    try:
        procs.start("pipeline", "worker", "--agents", "speculate")
        wait_for_groups(settings, [f"{settings.topic_prefix}-pipeline"], timeout_s=120)
        codec = Codec()
        producer = make_producer(settings, {"message.max.bytes": 1_048_576})
        topic = settings.topic("requests")
        valid = [
            RequestEvent(f"r{i}", 1 + i, T0 + i, "feed", (100 + i, 400 + i)) for i in range(200)
        ]
        big = b"\xff" * BIG
        for i, r in enumerate(valid):
            producer.produce(
                topic, key=str(r.user_id).encode(), value=codec.encode(r), timestamp=r.event_time_ms
            )
            if i == 100:
                producer.produce(topic, key=b"7", value=big)
        assert producer.flush(30) == 0

        seen: set[str] = set()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(seen) < len(valid):
            seen = {
                codec.decode(v, ProposalBatch).request_id
                for _, v in read_topic(settings, settings.topic("speculated"))
            }
            time.sleep(1.0)
        assert len(seen) == len(valid), f"{len(seen)} of {len(valid)} valid requests speculated"
        procs.alive()  # the worker did not crash
        dead = [
            codec.decode(v, DeadLetter)
            for _, v in read_topic(settings, settings.topic("dead-letter"))
        ]
        assert len(dead) == 1 and dead[0].source_topic == topic
        assert dead[0].raw_value == big[:MAX_RAW_VALUE_BYTES]
        assert f"of {BIG} bytes" in dead[0].error
        assert hashlib.sha256(big).hexdigest() in dead[0].error
    finally:
        procs.stop_all()
