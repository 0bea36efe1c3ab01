"""The one place Kafka producers are built, so every producer partitions keys like Faust does.

Faust's RocksDB tables answer ``table[key]`` from the *current event's partition* only, so a
user's state written while processing one topic is visible while processing another only if the
user's key lands on the same partition number in both. Faust (aiokafka) and the Java client hash
keys with murmur2; librdkafka's default (``consistent_random``) uses CRC32 and puts about 75 % of
users on another partition at 4 partitions. ``murmur2_random`` is librdkafka's Java-compatible
partitioner (murmur2 of the key, positive, modulo the partition count; random for a null key).

Consumers and admin clients are built here too, so every confluent-kafka client gets the same
bootstrap servers and credentials (:func:`streams.kafka_security.librdkafka_security`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from streams.kafka_security import librdkafka_security
from streams.settings import Settings

#: librdkafka's name for the Java/aiokafka-compatible key hash (murmur2).
FAUST_PARTITIONER = "murmur2_random"


def producer_config(
    settings: Settings, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """librdkafka settings of a SOLARIS producer; ``overrides`` may not change the partitioner."""
    overrides = dict(overrides or {})
    if overrides.get("partitioner", FAUST_PARTITIONER) != FAUST_PARTITIONER:
        raise ValueError(
            f"every producer of a SOLARIS topic must use {FAUST_PARTITIONER!r} (Faust's key hash); "
            f"got {overrides['partitioner']!r}"
        )
    config = client_config(settings)
    config["partitioner"] = FAUST_PARTITIONER
    config.update(overrides)
    return config


def client_config(settings: Settings, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka settings every SOLARIS client starts from: bootstrap servers and credentials.

    Raises :class:`~streams.kafka_security.KafkaSecurityError` for inconsistent credentials."""
    config: dict[str, Any] = {"bootstrap.servers": settings.kafka_bootstrap}
    config.update(librdkafka_security(settings))
    config.update(overrides or {})
    return config


def consumer_config(
    settings: Settings, group_id: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """librdkafka settings of a SOLARIS consumer in ``group_id`` (``overrides`` win)."""
    return client_config(settings, {"group.id": group_id, **(overrides or {})})


def make_consumer(
    settings: Settings, group_id: str, overrides: Mapping[str, Any] | None = None
) -> Consumer:
    """A confluent-kafka consumer with the configured bootstrap servers and credentials."""
    return Consumer(consumer_config(settings, group_id, overrides))


def make_admin(settings: Settings, overrides: Mapping[str, Any] | None = None) -> AdminClient:
    """A confluent-kafka admin client with the configured bootstrap servers and credentials."""
    return AdminClient(client_config(settings, overrides))


def make_producer(settings: Settings, overrides: Mapping[str, Any] | None = None) -> Producer:
    """A confluent-kafka producer that partitions keys exactly like Faust's agents.

    ``overrides``: extra librdkafka settings (``{"linger.ms": 5}``); the partitioner is fixed.
    """
    return Producer(producer_config(settings, overrides))


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Faust (aiokafka's ``DefaultPartitioner``) picks for ``key``; what
    :func:`make_producer` must agree with."""
    if partitions <= 0:
        raise ValueError("partitions must be positive")
    all_partitions = list(range(partitions))
    return int(DefaultPartitioner()(key, all_partitions, all_partitions))
