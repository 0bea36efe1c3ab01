"""Produce and consume through the real broker with confluent-kafka, keyed by user."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from schemas.codec import Codec
from schemas.records import RequestEvent
from streams.kafka_clients import make_producer
from streams.settings import Settings
from streams.topics import TOPICS, create_topics

pytestmark = pytest.mark.integration
T0 = 1_700_000_000_000


def test_topics_are_created_idempotently(test_settings: Settings, kafka_bootstrap: str) -> None:
    first = create_topics(test_settings)
    assert {r.name for r in first} == {test_settings.topic(n) for n in TOPICS}
    assert all(r.created and r.partitions == test_settings.topic_partitions for r in first)
    assert not any(r.created for r in create_topics(test_settings))


def test_created_topics_keep_old_event_time_records(
    test_settings: Settings, kafka_bootstrap: str
) -> None:
    # Message timestamps are event times; recorded traffic is years old, so time retention
    # would delete it at the broker's next check whether consumed or not (seen in a kill -9
    # test: the restarted worker's committed offset fell below the log start).
    from confluent_kafka.admin import ConfigResource

    from streams.topics import admin_client

    create_topics(test_settings, names=("requests",))
    resource = ConfigResource(ConfigResource.Type.TOPIC, test_settings.topic("requests"))
    admin = admin_client(test_settings)  # keep a reference until the future is resolved
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "-1"
    assert configs["retention.bytes"].value == str(test_settings.topic_retention_bytes)


def test_produce_consume_round_trip(
    test_settings: Settings, kafka_bootstrap: str, unique: str
) -> None:
    create_topics(test_settings, names=("requests",))
    topic = test_settings.topic("requests")
    codec = Codec()
    sent = [RequestEvent(f"r{i}", i % 3, T0 + i, "feed", (i, i + 1)) for i in range(30)]
    producer = make_producer(test_settings, {"enable.idempotence": True})
    for ev in sent:
        producer.produce(
            topic, key=str(ev.user_id).encode(), value=codec.encode(ev), timestamp=ev.event_time_ms
        )
    assert producer.flush(10) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"g{unique}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[int, RequestEvent]] = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                if len(got) == len(sent):
                    break
                continue
            got.append((msg.partition(), codec.decode(msg.value(), RequestEvent)))
            assert msg.timestamp()[1] == got[-1][1].event_time_ms
    finally:
        consumer.close()
    assert len(got) == len(sent)
    assert {e.request_id for _, e in got} == {e.request_id for e in sent}
    # Keyed by user: every user's events land on exactly one partition, in order.
    for user in range(3):
        parts = {p for p, e in got if e.user_id == user}
        assert len(parts) == 1
        times = [e.event_time_ms for _, e in got if e.user_id == user]
        assert times == sorted(times)
