"""Internal messages dated past the broker's timestamp limit cost only themselves: dead-lettered
(``future_event_time``), the rest of the batch embedded, no agent crash."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from schemas.codec import Codec
from schemas.records import DeadLetter, ProposalBatch
from streams.kafka_clients import make_producer
from tests.integration.live_harness import (
    fresh_live_settings,
    read_topic,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MINUTE_MS = 60_000


@pytest.mark.parametrize(
    "ahead_min",
    [
        pytest.param((24 * 60,), id="one-day-ahead"),
        # a message 50 min ahead must not raise the limit for one 100 min ahead (the broker
        # refuses outputs > 1 h ahead: the agent crashed when the limit followed the mark)
        pytest.param((50, 100), id="chained"),
    ],
)
def test_output_dated_past_the_broker_limit_costs_only_its_own_message(
    bundle: Path, tmp_path: Path, ahead_min: tuple[int, ...]
) -> None:
    """``verified`` batches that decode, dated ``ahead_min`` minutes ahead of the wall clock,
    among valid ones: the last is past the broker's 1 h limit and must be dead-lettered
    (``future_event_time``), the valid ones embedded, and the FM agent must not crash."""
    import redis

    from streams.lag import wait_for_groups
    from streams.topics import create_topics
    from tests.integration.live_harness import Procs

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    procs = Procs(settings, tmp_path)
    t0 = 1_704_067_200_000
    now_ms = int(time.time() * 1000)

    def verified(user: int, t: int) -> ProposalBatch:
        return ProposalBatch(
            f"r{user}", user, t, 2, (10, 11), ("candidates",) * 2, (0.5, 0.4), (1,), (1,), (t - 1,)
        )

    try:
        procs.start("fm", "worker", "--agents", "embed")
        wait_for_groups(settings, [f"{settings.topic_prefix}-fm"], timeout_s=120)
        codec, producer = Codec(), make_producer(settings)
        batches = [verified(u, t0) for u in range(1, 21)]
        for k, minutes in enumerate(ahead_min):
            batches.insert(10 + k, verified(90 + k, now_ms + minutes * MINUTE_MS))
        for b in batches:
            producer.produce(settings.topic("verified"), key=b"1", value=codec.encode(b))
        assert producer.flush(10) == 0
        client = redis.Redis.from_url(settings.store_url)
        deadline = time.monotonic() + 60
        users: set[int] = set()
        while time.monotonic() < deadline and len(users) < 20:
            procs.alive()
            keys = client.scan_iter(match=f"{settings.key_prefix}:*:p:*", count=1000)
            users = {int(k.split(b"{u")[1].split(b"}")[0]) for k in keys}
            time.sleep(0.5)
        client.close()
        time.sleep(2.0)
        dead = [
            codec.decode(v, DeadLetter)
            for _, v in read_topic(settings, settings.topic("dead-letter"))
        ]
        log = procs.log("fm")
        assert "Crashed" not in log, "the FM agent crashed on the refused output message"
        assert users >= set(range(1, 21)), f"embedded users {sorted(users)}"
        assert [d.reason for d in dead] == ["future_event_time"]
    finally:
        procs.stop_all()
