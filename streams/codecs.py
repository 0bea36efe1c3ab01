"""The one place the wire codec is built: the private schema ids, or a schema registry's.

With ``SOLARIS_SCHEMA_REGISTRY_URL`` set, every producer and consumer of the project encodes and
decodes with the ids a Confluent-compatible schema registry assigns (subjects per topic,
registered and compatibility-checked here, at the caller's startup); empty, with the private ids
of :mod:`schemas.registry` (the offline fallback). Docs: docs/schema-registry.md.
"""

from __future__ import annotations

import logging

from confluent_kafka.schema_registry import SchemaRegistryClient

from schemas.codec import Codec
from schemas.limits import Limits
from schemas.remote_registry import RemoteSchemas
from streams.settings import Settings
from streams.topics import TOPIC_RECORDS

log = logging.getLogger(__name__)


def subjects(settings: Settings) -> dict[str, type]:
    """Schema-registry subject -> record type, one per Avro topic (TopicNameStrategy)."""
    return {f"{settings.topic(name)}-value": rt for name, rt in TOPIC_RECORDS.items()}


def registry_schemas(settings: Settings) -> RemoteSchemas:
    """Registers (or looks up) every subject's schema; raises
    :class:`schemas.remote_registry.IncompatibleSchema` naming the subject it refuses."""
    client = SchemaRegistryClient({"url": settings.schema_registry_url})
    try:
        schemas = RemoteSchemas(client, subjects(settings))
    except BaseException:
        client.close()  # the caller's startup fails: leave no connection behind
        raise
    log.info(
        "schema registry subjects ready",
        extra={"schema_registry": settings.schema_registry_url, "ids": schemas.subject_ids},
    )
    return schemas


def make_codec(settings: Settings) -> Codec:
    """The codec of every producer and consumer: registry ids when a registry URL is set."""
    limits = Limits(max_candidates=settings.max_candidates)
    if not settings.schema_registry_url:
        return Codec(limits)
    return Codec(limits, registry_schemas(settings))
