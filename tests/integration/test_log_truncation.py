"""Issue 24's reproduction: ``verified`` truncated past the FM group's committed offset while
its worker was down (``delete_records``, keeping the newest message of each partition).

Before: the restarted worker found its committed offset gone, read from the log's first offset,
saw a gap and sought back to the missing offset, forever: 0 of the surviving batches embedded,
lag stuck. Now the partition goes on from the log's first offset (counted and logged as an
error): every surviving batch is embedded and the lag drains.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from schemas.codec import Codec
from schemas.records import ProposalBatch
from streams.kafka_clients import make_admin, make_consumer, make_producer
from streams.settings import Settings
from tests.integration.live_harness import Procs, fresh_live_settings, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T0 = 1_704_067_200_000


def verified(user: int) -> ProposalBatch:
    return ProposalBatch(
        f"r{user}", user, T0, 5, (10, 11), ("candidates",) * 2, (0.5, 0.4), (1, 2), (0, 1),
        (T0 - 2, T0 - 1),
    )  # fmt: skip


def embedded_users(settings: Settings) -> set[int]:
    client = redis.Redis.from_url(settings.store_url)
    try:
        keys = client.scan_iter(match=f"{settings.key_prefix}:*:p:*", count=1000)
        return {int(k.split(b"{u")[1].split(b"}")[0]) for k in keys}
    finally:
        client.close()


def keep_only_newest(settings: Settings, topic: str) -> None:
    from confluent_kafka import TopicPartition

    probe = make_consumer(settings, "truncate-probe")
    try:
        cut = []
        for p in range(settings.topic_partitions):
            _, high = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 1:
                cut.append(TopicPartition(topic, p, high - 1))
    finally:
        probe.close()
    admin = make_admin(settings)  # held: its futures complete on its own thread
    for future in admin.delete_records(cut).values():
        future.result(timeout=30)


def test_a_truncated_partition_goes_on_from_the_logs_first_offset(
    bundle: Path, tmp_path: Path
) -> None:
    from streams.lag import LagReader, wait_for_groups
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    topic, group = settings.topic("verified"), f"{settings.topic_prefix}-fm"
    codec, producer = Codec(), make_producer(settings)

    def send(users: range) -> None:
        for u in users:
            producer.produce(topic, key=str(u).encode(), value=codec.encode(verified(u)))
        assert producer.flush(10) == 0

    procs = Procs(settings, tmp_path)
    lag = LagReader(settings)
    try:
        procs.start("fm", "worker", "--agents", "embed")
        wait_for_groups(settings, [group], timeout_s=120)
        send(range(1, 5))
        assert lag.wait_drained([group], [topic], timeout_s=60)
        assert embedded_users(settings) == {1, 2, 3, 4}
        procs.stop("fm")  # graceful: its offsets are committed

        send(range(11, 21))  # while the FM group is down
        keep_only_newest(settings, topic)
        surviving = {codec.decode(v, ProposalBatch).user_id for _, v in read_topic(settings, topic)}
        assert surviving and surviving < set(range(11, 21))

        procs.start("fm2", "worker", "--agents", "embed")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not surviving <= embedded_users(settings):
            procs.alive()
            time.sleep(0.5)
        assert surviving <= embedded_users(settings), "the surviving batches were not embedded"
        assert lag.wait_drained([group], [topic], timeout_s=30), "the FM group's lag is stuck"
        assert "removed from the log before they were processed" in procs.log("fm2")
    finally:
        lag.close()
        procs.stop_all()
