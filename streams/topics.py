"""The topic catalogue and idempotent topic creation (confluent-kafka AdminClient).

All SOLARIS topics are keyed by ``user_id`` so one user's events and state share a partition.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    ProposalBatch,
    RequestEvent,
)
from streams.errors import KafkaUnavailable, TopicLayoutError
from streams.kafka_clients import make_admin
from streams.settings import Settings

log = logging.getLogger(__name__)

#: Logical topic names; the full name is ``<topic_prefix>.<name>``.
TOPICS: tuple[str, ...] = (
    "requests",
    "impressions",
    "speculated",
    "verified",
    "embeddings",
    "scores",
    "dead-letter",
)

#: The record type of each Avro topic (``scores`` carries JSON): one schema-registry subject
#: per topic, ``<full topic>-value`` (docs/schema-registry.md).
TOPIC_RECORDS: dict[str, type] = {
    "requests": RequestEvent,
    "impressions": ImpressionEvent,
    "speculated": ProposalBatch,
    "verified": ProposalBatch,
    "embeddings": EmbeddingBatch,
    "dead-letter": DeadLetter,
}


@dataclass(frozen=True, slots=True)
class TopicResult:
    """Outcome of creating one topic."""

    name: str
    created: bool
    partitions: int


def topic_config(settings: Settings) -> dict[str, str]:
    """Retention of created topics. Time retention is off by default: the message timestamps are
    event times, which for recorded traffic lie in the past, and the broker would delete such
    records (consumed or not) at its next retention check."""
    return {
        "retention.ms": str(settings.topic_retention_ms),
        "retention.bytes": str(settings.topic_retention_bytes),
    }


def admin_client(settings: Settings) -> AdminClient:
    return make_admin(settings, {"socket.timeout.ms": 10_000})


def create_topics(
    settings: Settings, names: tuple[str, ...] = TOPICS, timeout_s: float = 30.0
) -> list[TopicResult]:
    """Create the topics that do not exist yet; existing ones are left as they are.

    Idempotent. Raises :class:`KafkaUnavailable` when the broker cannot be reached or refuses.
    """
    admin = admin_client(settings)
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot list topics at {settings.kafka_bootstrap}: {exc}") from exc
    results: list[TopicResult] = []
    to_create: list[NewTopic] = []
    for name in names:
        full = settings.topic(name)
        if full in existing:
            results.append(TopicResult(full, False, len(existing[full].partitions)))
        else:
            to_create.append(
                NewTopic(
                    full,
                    settings.topic_partitions,
                    settings.topic_replication,
                    config=topic_config(settings),
                )
            )
    if to_create:
        futures = admin.create_topics(to_create, operation_timeout=timeout_s)
        for full, future in futures.items():
            try:
                future.result(timeout=timeout_s)
                results.append(TopicResult(full, True, settings.topic_partitions))
                log.info("topic created", extra={"topic": full})
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise KafkaUnavailable(f"creating {full} failed: {exc}") from exc
                results.append(TopicResult(full, False, settings.topic_partitions))
        _wait_in_metadata(admin, [t.topic for t in to_create], timeout_s)
    return sorted(results, key=lambda r: r.name)


#: Topics a pipeline worker reads per-user state across: they must be co-partitioned.
CO_PARTITIONED: tuple[str, ...] = (
    "requests",
    "impressions",
    "speculated",
    "verified",
    "embeddings",
)


def partition_counts(
    settings: Settings, names: tuple[str, ...], timeout_s: float = 30.0
) -> dict[str, int]:
    """Partition count of each existing topic among ``names`` (full names); absent ones left out."""
    admin = admin_client(settings)
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot list topics at {settings.kafka_bootstrap}: {exc}") from exc
    return {name: len(existing[name].partitions) for name in names if name in existing}


def check_copartitioned(
    settings: Settings, extra: tuple[str, ...] = (), timeout_s: float = 30.0
) -> dict[str, int]:
    """Refuse to run on topics that would split a user's state across partition numbers.

    Every topic in :data:`CO_PARTITIONED` that exists must have exactly
    ``settings.topic_partitions`` partitions (Faust's tables and changelogs are created with that
    count), and so must the topics named in ``extra`` (full names, e.g. table changelogs).
    Returns the counts seen; raises :class:`TopicLayoutError` naming every mismatch.
    """
    names = tuple(settings.topic(n) for n in CO_PARTITIONED) + extra
    counts = partition_counts(settings, names, timeout_s)
    wrong = {n: c for n, c in counts.items() if c != settings.topic_partitions}
    if wrong:
        listed = ", ".join(f"{n} has {c}" for n, c in sorted(wrong.items()))
        raise TopicLayoutError(
            f"topics are not co-partitioned: SOLARIS_TOPIC_PARTITIONS={settings.topic_partitions} "
            f"but {listed}. One user's state must sit on one partition number in every topic; "
            "recreate the topics with one partition count (or set SOLARIS_TOPIC_PARTITIONS to it)."
        )
    return counts


def create_changelog_topics(settings: Settings, names: list[str], timeout_s: float = 30.0) -> None:
    """Create Faust table changelog topics (compacted, ``topic_partitions`` each) before the
    worker starts, so they are in the cluster metadata when Faust checks their partitions: left
    to Faust, a topic created milliseconds before that check was reported "not found" and the
    requests agent crashed with ``PartitionsMismatch`` (0 partitions) until the worker restarted.
    Idempotent; existing topics are left as they are (and checked by :func:`check_copartitioned`).
    """
    admin = admin_client(settings)
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot list topics at {settings.kafka_bootstrap}: {exc}") from exc
    todo = [
        NewTopic(
            name,
            settings.topic_partitions,
            settings.topic_replication,
            config={"cleanup.policy": "compact"},
        )
        for name in names
        if name not in existing
    ]
    if not todo:
        return
    for name, future in admin.create_topics(todo, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaUnavailable(f"creating {name} failed: {exc}") from exc
    _wait_in_metadata(admin, [t.topic for t in todo], timeout_s)


def _wait_in_metadata(admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Return once the broker's metadata shows every topic with every partition led.

    CreateTopics returns when the controller has the topic; the broker's metadata cache (what
    clients are told) follows a little later, seconds on a freshly started broker. A Faust
    worker whose first metadata request came in between was assigned nothing and, with
    aiokafka refreshing metadata every 5 minutes, idled while its group looked Stable (found by
    the Prometheus test right after a broker start: every lookup "missing").
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=timeout_s).topics
        if all(_led(topics.get(n)) for n in names):
            return
        time.sleep(0.1)
    raise KafkaUnavailable(f"topics {names} not in the cluster metadata after {timeout_s:.0f} s")


def _led(meta: Any) -> bool:
    """A topic's metadata lists partitions, each with a leader."""
    return bool(meta is not None and meta.partitions) and all(
        p.leader >= 0 for p in meta.partitions.values()
    )
