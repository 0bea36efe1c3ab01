"""A message that decodes but fails in processing costs only itself (real broker, Redis, Faust).

The issue's scenario: among 40 valid ``verified`` batches, messages the FM step cannot process
(history times out of order, a history label of 300). Before: the agent crashed, Faust acked the
in-flight events, and 0 of 40 valid batches were embedded with 0 dead letters. Now every valid
batch is embedded and each bad one is dead-lettered with reason ``processing_error``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from schemas.codec import Codec
from schemas.records import DeadLetter, ProposalBatch
from streams.kafka_clients import make_producer
from tests.integration.live_harness import Procs, fresh_live_settings, raw_encode, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T0 = 1_704_067_200_000


def verified(user: int, times: tuple[int, ...], labels: tuple[int, ...]) -> ProposalBatch:
    return ProposalBatch(
        f"r{user}", user, T0, 5, (10, 11), ("candidates",) * 2, (0.5, 0.4), (1, 2), labels, times
    )


def test_poison_messages_are_dead_lettered_and_the_batch_is_embedded(
    bundle: Path, tmp_path: Path
) -> None:
    from streams.lag import wait_for_groups
    from streams.topics import create_topics

    # one micro-batch holds the poison and the valid messages
    settings = fresh_live_settings(bundle, embed_max_wait_ms=500)
    create_topics(settings)
    procs = Procs(settings, tmp_path)
    try:
        procs.start("fm", "worker", "--agents", "embed")
        wait_for_groups(settings, [f"{settings.topic_prefix}-fm"], timeout_s=120)
        codec, producer = Codec(), make_producer(settings)
        topic = settings.topic("verified")
        good = [verified(u, (T0 - 2, T0 - 1), (0, 1)) for u in range(1, 41)]
        bad = [
            verified(98, (T0 - 1, T0 - 2), (0, 1)),  # history times out of order
            verified(99, (T0 - 2, T0 - 1), (0, 300)),  # a label of 300
        ]
        for i, b in enumerate(good):
            producer.produce(topic, key=str(b.user_id).encode(), value=codec.encode(b))
            if i == 20:
                for p in bad:
                    producer.produce(topic, key=str(p.user_id).encode(), value=raw_encode(p))
        assert producer.flush(10) == 0

        client = redis.Redis.from_url(settings.store_url)
        deadline = time.monotonic() + 90
        keys: list[bytes] = []
        while time.monotonic() < deadline:
            procs.alive()
            keys = list(client.scan_iter(match=f"{settings.key_prefix}:*:p:*", count=1000))
            if len(keys) >= 2 * len(good):
                break
            time.sleep(0.5)
        client.close()
        users = {int(k.split(b"{u")[1].split(b"}")[0]) for k in keys}
        assert users == set(range(1, 41)), f"embedded users {sorted(users)}"
        procs.alive()  # the worker is still up
        time.sleep(1.0)
        dead = [
            Codec().decode(v, DeadLetter)
            for _, v in read_topic(settings, settings.topic("dead-letter"))
        ]
        assert sorted((d.source_topic, d.reason) for d in dead) == [
            (topic, "processing_error"),
            (topic, "processing_error"),
        ]
        assert {d.raw_value for d in dead} == {raw_encode(p) for p in bad}
        assert all(d.error for d in dead)
    finally:
        procs.stop_all()
