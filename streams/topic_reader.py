"""Read a whole topic back (reports, audits, tests): every partition from the beginning to its end.

Assigns partitions directly (no consumer-group join, nothing committed) and raises instead of
returning a partial read when the end of every partition is not reached in time: an audit that
silently reads nothing would pass for "no data".
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from streams.errors import KafkaUnavailable
from streams.kafka_clients import make_consumer
from streams.settings import Settings


@dataclass(frozen=True, slots=True)
class Message:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


def read_topic(
    settings: Settings,
    topic: str,
    timeout_s: float = 60.0,
    start: dict[int, int] | None = None,
) -> list[Message]:
    """Every message of ``topic``, per partition in offset order (partitions one after another);
    with ``start``, a partition named there is read from that offset instead.

    Raises :class:`KafkaUnavailable` if the topic is missing or not read to its end in time.
    """
    consumer = make_consumer(
        settings,
        "solaris-topic-reader",  # required by the client; never joins: assign()
        {"enable.auto.commit": False, "enable.partition.eof": True},
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise KafkaUnavailable(f"topic {topic} not found")
        parts = sorted(meta.partitions)
        begin = start or {}
        consumer.assign([TopicPartition(topic, p, begin.get(p, OFFSET_BEGINNING)) for p in parts])
        out: list[Message] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(eof) < len(parts):
            if time.monotonic() > deadline:
                raise KafkaUnavailable(
                    f"read {len(out)} messages of {topic} in {timeout_s:.0f} s; "
                    f"partitions at their end: {sorted(eof)} of {parts}"
                )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            partition, offset = msg.partition(), msg.offset()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and partition is not None:
                    eof.add(partition)
                    continue
                raise KafkaUnavailable(f"reading {topic}: {error}")
            if partition is None or offset is None:  # never for a fetched record
                continue
            out.append(Message(partition, offset, msg.timestamp()[1], msg.key(), msg.value()))
    finally:
        consumer.close()
    out.sort(key=lambda m: (m.partition, m.offset))
    return out
