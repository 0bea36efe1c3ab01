"""The Kafka side of ``solaris dead-letters``: read the topic (all of it, or what the replay group
has not replayed yet), send selected raw messages back, and remember how far a replay got.
See :mod:`streams.dead_letter_ops` for what is selected and why."""

from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka import OFFSET_INVALID, TopicPartition

from streams.dead_letter_ops import Found, decode_all
from streams.errors import KafkaUnavailable
from streams.kafka_clients import make_consumer, make_producer
from streams.settings import Settings
from streams.topic_reader import read_topic


def replay_group(settings: Settings) -> str:
    return f"{settings.topic_prefix}-dead-letter-replay"


def _partitions(settings: Settings, topic: str) -> list[int]:
    consumer = make_consumer(settings, replay_group(settings), {"enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise KafkaUnavailable(f"topic {topic} not found")
        return sorted(meta.partitions)
    finally:
        consumer.close()


def replayed_up_to(settings: Settings) -> dict[int, int]:
    """Per partition of the dead-letter topic, the offset the last replay stopped at."""
    topic = settings.topic("dead-letter")
    consumer = make_consumer(settings, replay_group(settings), {"enable.auto.commit": False})
    try:
        parts = [TopicPartition(topic, p) for p in _partitions(settings, topic)]
        done = consumer.committed(parts, timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in done if tp.offset != OFFSET_INVALID}


def read_dead_letters(settings: Settings, from_start: bool = True) -> tuple[list[Found], int]:
    """Dead letters (and how many could not be decoded): every one, or those after the last
    replay."""
    start = None if from_start else replayed_up_to(settings)
    msgs = read_topic(settings, settings.topic("dead-letter"), start=start)
    return decode_all(((m.partition, m.offset, m.value) for m in msgs), settings)


def send_back(settings: Settings, letters: Sequence[Found], rate: float = 0.0) -> int:
    """Produce each letter's raw key and value to its source topic, at most ``rate`` a second
    (0: no pacing); returns how many were delivered (raises :class:`KafkaUnavailable` if any
    was not)."""
    producer = make_producer(settings)
    gap_s = 1.0 / rate if rate > 0 else 0.0
    failed: list[str] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    for f in letters:
        producer.produce(
            f.letter.source_topic,
            key=f.letter.raw_key,
            value=f.letter.raw_value,
            on_delivery=report,
        )
        producer.poll(0)
        if gap_s:
            time.sleep(gap_s)
    left = producer.flush(30)
    if failed or left:
        raise KafkaUnavailable(
            f"{len(failed) + left} replayed messages not delivered: {failed[:3]}"
        )
    return len(letters)


def mark_replayed(settings: Settings, found: Sequence[Found]) -> None:
    """Remember that the replay got past every dead letter in ``found``."""
    topic = settings.topic("dead-letter")
    ends: dict[int, int] = {}
    for f in found:
        ends[f.partition] = max(ends.get(f.partition, 0), f.offset + 1)
    if not ends:
        return
    consumer = make_consumer(settings, replay_group(settings), {"enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in ends.items()], asynchronous=False
        )
    finally:
        consumer.close()
