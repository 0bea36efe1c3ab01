"""Co-partitioning on the real broker: our producers agree with Faust, and workers refuse
topics with different partition counts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from streams.errors import TopicLayoutError
from streams.kafka_clients import make_producer, partition_for
from streams.settings import REPO_ROOT, Settings
from streams.topics import admin_client, check_copartitioned, create_topics

pytestmark = pytest.mark.integration
KEYS = [str(u).encode() for u in range(300)]


def delivered_partitions(producer: Producer, topic: str) -> dict[bytes, int]:
    got: dict[bytes, int] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        got[msg.key()] = msg.partition()  # type: ignore[attr-defined]

    for key in KEYS:
        producer.produce(topic, key=key, value=b"x", on_delivery=on_delivery)
    assert producer.flush(15) == 0
    return got


def test_make_producer_puts_every_key_where_faust_would(
    test_settings: Settings, kafka_bootstrap: str
) -> None:
    settings = test_settings.model_copy(update={"topic_partitions": 4})
    create_topics(settings, names=("requests",))
    topic = settings.topic("requests")
    ours = delivered_partitions(make_producer(settings), topic)
    assert ours == {k: partition_for(k, 4) for k in KEYS}
    # librdkafka's default (CRC32) disagrees for most keys: what the factory exists to prevent.
    default = delivered_partitions(Producer({"bootstrap.servers": kafka_bootstrap}), topic)
    assert sum(default[k] != ours[k] for k in KEYS) > len(KEYS) // 2


def test_workers_refuse_topics_with_different_partition_counts(
    test_settings: Settings, kafka_bootstrap: str
) -> None:
    settings = test_settings.model_copy(update={"topic_partitions": 4})
    admin = admin_client(settings)  # kept alive until the futures resolve
    futures = admin.create_topics(
        [NewTopic(settings.topic("impressions"), 3, 1)], operation_timeout=30
    )
    for future in futures.values():
        future.result(timeout=30)
    create_topics(settings)
    with pytest.raises(TopicLayoutError, match=r"impressions has 3"):
        check_copartitioned(settings)

    env = dict(os.environ)
    env.update(
        SOLARIS_TOPIC_PREFIX=settings.topic_prefix,
        SOLARIS_TOPIC_PARTITIONS="4",
        SOLARIS_KAFKA_BOOTSTRAP=kafka_bootstrap,
        PYTHONPATH=str(REPO_ROOT),
        COLUMNS="200",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli", "worker", "--agents", "embed"],
        env=env,
        capture_output=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == 2, out[-2000:]
    assert "not co-partitioned" in out and "impressions has 3" in out


def test_co_partitioned_topics_pass_the_check(
    test_settings: Settings, kafka_bootstrap: str
) -> None:
    settings = test_settings.model_copy(update={"topic_partitions": 4})
    create_topics(settings)
    counts = check_copartitioned(settings)
    assert len(counts) == 5 and set(counts.values()) == {4}
