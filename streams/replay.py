"""Replay recorded traffic (or a time range of a topic) into Kafka, keeping event time.

Each message's Kafka timestamp is its event time and its key the user id, in event-time order.
``speed`` N plays N event-time seconds per wall second (0 = as fast as possible). ``lockstep``
waits before each request until the given consumer groups have drained everything sent so far:
slow, but it makes the live pipeline process traffic in exactly the simulator's order (parity).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from schemas.records import ImpressionEvent, RequestEvent
from streams.codecs import make_codec
from streams.errors import KafkaUnavailable
from streams.kafka_clients import make_consumer, make_producer
from streams.settings import Settings

log = logging.getLogger(__name__)
Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class ReplayStats:
    messages: int
    requests: int
    impressions: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0


def _producer(settings: Settings) -> Producer:
    return make_producer(
        settings,
        {"enable.idempotence": True, "linger.ms": 5, "queue.buffering.max.messages": 500_000},
    )


def _produce(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    ts: int,
    headers: Any = None,  # as the client returns them: a list of (name, value) or None
) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value, timestamp=ts, headers=headers)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.1)


def replay_events(
    settings: Settings,
    events: Iterable[RequestEvent | ImpressionEvent],
    speed: float = 0.0,
    lockstep: Callable[[], None] | None = None,
    progress: Progress | None = None,
) -> ReplayStats:
    """Produce ``events`` to the requests/impressions topics; returns counts and wall time."""
    codec = make_codec(settings)
    producer = _producer(settings)
    topics = {
        RequestEvent: settings.topic("requests"),
        ImpressionEvent: settings.topic("impressions"),
    }
    start = time.perf_counter()
    first_event: int | None = None
    n = n_req = n_imp = 0
    for ev in events:
        if first_event is None:
            first_event = ev.event_time_ms
        if speed > 0:
            ahead = (ev.event_time_ms - first_event) / 1000.0 / speed - (
                time.perf_counter() - start
            )
            if ahead > 0:
                producer.poll(0)
                time.sleep(ahead)
        is_request = isinstance(ev, RequestEvent)
        if is_request and lockstep is not None:
            producer.flush(30)
            lockstep()
        _produce(
            producer, topics[type(ev)], str(ev.user_id).encode(), codec.encode(ev), ev.event_time_ms
        )
        n += 1
        n_req += is_request
        n_imp += not is_request
        if n % 1000 == 0:
            producer.poll(0)
            if progress is not None:
                progress(n)
    remaining = producer.flush(60)
    if remaining:
        raise KafkaUnavailable(f"{remaining} messages not delivered after 60 s")
    if progress is not None:
        progress(n)
    return ReplayStats(n, n_req, n_imp, time.perf_counter() - start)


def replay_file(
    settings: Settings,
    path: Path,
    speed: float = 0.0,
    lockstep: Callable[[], None] | None = None,
    progress: Progress | None = None,
) -> ReplayStats:
    from models.data.traffic import read_traffic

    return replay_events(settings, read_traffic(path), speed, lockstep, progress)


def replay_topic_range(
    settings: Settings,
    from_topic: str,
    start_ms: int,
    end_ms: int,
    to_topic: str,
    progress: Progress | None = None,
) -> ReplayStats:
    """Copy messages with timestamps in ``[start_ms, end_ms)`` from one topic to another,
    keeping key, value, timestamp and headers (per partition order; partitioner keeps keys)."""
    consumer = make_consumer(
        settings,
        f"solaris-replay-{time.time_ns()}",
        {
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        },
    )
    producer = _producer(settings)
    start = time.perf_counter()
    n = 0
    try:
        meta = consumer.list_topics(from_topic, timeout=10).topics.get(from_topic)
        if meta is None or meta.error:
            raise KafkaUnavailable(f"topic {from_topic} not found")
        wanted = [TopicPartition(from_topic, p, start_ms) for p in sorted(meta.partitions)]
        offsets = consumer.offsets_for_times(wanted, timeout=10)
        assign = [tp for tp in offsets if tp.offset >= 0]
        if not assign:
            return ReplayStats(0, 0, 0, time.perf_counter() - start)
        consumer.assign(assign)
        open_parts = {tp.partition for tp in assign}
        while open_parts:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error, partition = msg.error(), msg.partition()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(partition)
                    continue
                raise KafkaUnavailable(str(error))
            ts = msg.timestamp()[1]
            if ts >= end_ms and partition is not None:
                open_parts.discard(partition)
                consumer.pause([TopicPartition(from_topic, partition)])
                continue
            _produce(producer, to_topic, msg.key(), msg.value(), ts, msg.headers())
            n += 1
            if progress is not None and n % 1000 == 0:
                progress(n)
    except KafkaException as exc:
        raise KafkaUnavailable(f"replay from {from_topic} failed: {exc}") from exc
    finally:
        consumer.close()
    producer.flush(60)
    return ReplayStats(n, 0, 0, time.perf_counter() - start)
