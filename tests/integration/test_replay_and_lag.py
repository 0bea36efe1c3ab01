"""Replay (file and topic time range) and consumer lag against the real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from schemas.codec import Codec
from schemas.records import ImpressionEvent, RequestEvent
from streams.kafka_clients import make_producer
from streams.lag import NOTHING_COMMITTED, LagReader, PartitionLag
from streams.replay import replay_events, replay_topic_range
from streams.settings import Settings
from streams.topics import create_topics
from tests.integration.live_harness import read_topic

pytestmark = pytest.mark.integration
T0 = 1_704_067_200_000


def events() -> list[RequestEvent | ImpressionEvent]:
    out: list[RequestEvent | ImpressionEvent] = []
    for i in range(20):
        t = T0 + i * 60_000
        out.append(RequestEvent(f"r{i}", i % 4, t, "feed", (1, 2, 3)))
        out.append(ImpressionEvent(f"r{i}", i % 4, 2, t, 1, i % 2))
    return out


def test_replay_keeps_event_time_and_user_keys(
    test_settings: Settings, kafka_bootstrap: str
) -> None:
    create_topics(test_settings, names=("requests", "impressions"))
    stats = replay_events(test_settings, events(), speed=0.0)
    assert (stats.messages, stats.requests, stats.impressions) == (40, 20, 20)
    codec = Codec()
    got = [codec.decode(v) for _, v in read_topic(test_settings, test_settings.topic("requests"))]
    assert sorted(r.request_id for r in got) == sorted(f"r{i}" for i in range(20))


def test_replay_topic_time_range(test_settings: Settings, kafka_bootstrap: str) -> None:
    create_topics(test_settings, names=("requests", "scores"))
    src, dst = test_settings.topic("requests"), test_settings.topic("scores")
    producer = make_producer(test_settings)
    for i in range(30):
        producer.produce(
            src,
            key=str(i % 3).encode(),
            value=f"v{i}".encode(),
            timestamp=T0 + i * 1000,
            headers=[("h", b"x")],
        )
    producer.flush(10)
    stats = replay_topic_range(test_settings, src, T0 + 10_000, T0 + 20_000, dst)
    assert stats.messages == 10
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": "check-range",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([dst])
    seen = []
    eof: set[int] = set()
    while len(eof) < test_settings.topic_partitions:
        msg = consumer.poll(5.0)
        assert msg is not None
        if msg.error():
            eof.add(msg.partition())
            continue
        seen.append((msg.value(), msg.timestamp()[1], msg.headers()))
    consumer.close()
    assert sorted(v for v, _, _ in seen) == sorted(f"v{i}".encode() for i in range(10, 20))
    assert all(ts == T0 + int(v[1:]) * 1000 and h == [("h", b"x")] for v, ts, h in seen)


def test_lag_counts_uncommitted_messages(
    test_settings: Settings, kafka_bootstrap: str, unique: str
) -> None:
    create_topics(test_settings, names=("requests",))
    topic = test_settings.topic("requests")
    producer = make_producer(test_settings)
    for i in range(10):
        producer.produce(topic, key=b"1", value=b"x", timestamp=T0 + i)
    producer.flush(10)
    group = f"{test_settings.topic_prefix}-probe"
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    taken = 0
    while taken < 4:
        msg = consumer.poll(5.0)
        if msg is not None and not msg.error():
            taken += 1
            last = msg
    consumer.commit(message=last, asynchronous=False)
    reader = LagReader(test_settings)
    try:
        assert group in reader.groups()
        rows = reader.lag([group], [topic])
        assert sum(r.lag for r in rows) == 6
        assert not reader.wait_drained([group], [topic], timeout_s=1.0, poll_s=0.1)
        _check_lag_cli(test_settings, group)
    finally:
        consumer.close()
        reader.close()


def test_partition_lag_when_nothing_committed() -> None:
    assert PartitionLag("g", "t", 0, NOTHING_COMMITTED, 7).lag == 7
    assert PartitionLag("g", "t", 0, 5, 7).lag == 2


def _check_lag_cli(settings: Settings, group: str) -> None:
    """`solaris lag`: JSON for scripts, --max-lag as an exit code, readable at 80 columns."""
    import json

    from typer.testing import CliRunner

    from streams.cli.main import app

    env = {
        "SOLARIS_TOPIC_PREFIX": settings.topic_prefix,
        "SOLARIS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "COLUMNS": "80",
    }
    runner = CliRunner()
    out = runner.invoke(app, ["lag", "--group", group, "--json"], env=env)
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body["max_lag"] == 6 and sum(r["lag"] for r in body["rows"]) == 6
    assert {r["group"] for r in body["rows"]} == {group}
    assert runner.invoke(app, ["lag", "--group", group, "--max-lag", "5"], env=env).exit_code == 1
    table = runner.invoke(app, ["lag", "--group", group, "--max-lag", "6"], env=env)
    assert table.exit_code == 0
    assert "probe" in table.stdout and "requests" in table.stdout  # names relative to the prefix
    assert max(len(line) for line in table.stdout.splitlines()) <= 80


def test_topics_list_and_infra_status_json(test_settings: Settings, kafka_bootstrap: str) -> None:
    import json

    from typer.testing import CliRunner

    from streams.cli.main import app

    create_topics(test_settings, names=("requests", "verified"))
    env = {
        "SOLARIS_TOPIC_PREFIX": test_settings.topic_prefix,
        "SOLARIS_KAFKA_BOOTSTRAP": kafka_bootstrap,
    }
    runner = CliRunner()
    out = runner.invoke(app, ["topics", "list", "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {
        test_settings.topic("requests"): test_settings.topic_partitions,
        test_settings.topic("verified"): test_settings.topic_partitions,
    }
    out = runner.invoke(app, ["infra", "status", "kafka", "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["kafka"]["healthy"] is True
