"""The registry-backed codec against a real schema registry (``infra/schema_registry.sh`` on a
spare port and data dir) and the real broker (issue 25 item 3).

A record of every Avro topic's type goes through the project's encoder with
``SOLARIS_SCHEMA_REGISTRY_URL`` set; a registry-aware consumer written only with confluent-kafka
(``Consumer`` + ``AvroDeserializer`` + ``SchemaRegistryClient``, no project code) decodes every
topic's message with the schemas it fetched from the registry, to the values that were sent.
An incompatible local schema is refused at startup with the subject named.

Skips with the reason when java or mvn are missing; fails instead under
``SOLARIS_REQUIRE_SERVICES``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas.codec import Codec, _fields
from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    ProposalBatch,
    RequestEvent,
)
from schemas.remote_registry import IncompatibleSchema, RemoteSchemas, self_contained
from streams.codecs import make_codec
from streams.kafka_clients import make_producer
from streams.settings import REPO_ROOT, Settings
from streams.topics import TOPIC_RECORDS, create_topics
from tests.ports import free_port

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "infra" / "schema_registry.sh"
T0 = 1_700_000_000_000


def _script(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), cmd], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A registry of this module's own (spare port, fresh data dir), stopped at the end."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        msg = f"the schema registry needs {', '.join(missing)}, not found here"
        if Settings().require_services:
            pytest.fail(msg)
        pytest.skip(msg)
    env = dict(os.environ) | {
        "SOLARIS_SCHEMA_REGISTRY_PORT": str(free_port()),
        "SOLARIS_SCHEMA_REGISTRY_DATA_DIR": str(tmp_path_factory.mktemp("registry")),
        "SOLARIS_PYTHON": sys.executable,
    }
    try:
        started = _script("start", env)
        assert started.returncode == 0, f"start failed:\n{started.stdout}\n{started.stderr}"
        yield _script("url", env).stdout.strip()
    finally:
        _script("stop", env)


def _samples(prefix: str) -> dict[str, Any]:
    """One record per Avro topic (values exact in float32, as Avro floats carry them)."""
    vec = np.arange(8, dtype=np.float16).tobytes()
    return {
        "requests": RequestEvent("r1", 7, T0, "feed", (1, 2, 3)),
        "impressions": ImpressionEvent("r1", 7, 2, T0, 1, 1),
        "speculated": ProposalBatch("r1", 7, T0, 3, (1, 2), ("candidates", "lookahead")),
        "verified": ProposalBatch(
            "r1", 7, T0, 3, (1,), ("candidates",), (0.5,), (5, 6), (1, 0), (T0 - 2, T0 - 1)
        ),
        "embeddings": EmbeddingBatch("r1", 7, T0, "fm-1", "FLOAT16", 4, (1, 2), vec),
        "dead-letter": DeadLetter(f"{prefix}.requests", 0, 12, "bad_header", "x", b"7", b"\1", T0),
    }


@contextlib.contextmanager
def _project_codec(settings: Settings) -> Iterator[Codec]:
    """The codec every producer and consumer of the project builds, its client closed after."""
    codec = make_codec(settings)
    try:
        yield codec
    finally:
        assert isinstance(codec.schemas, RemoteSchemas)
        codec.schemas.close()


def _as_dict(record: Any) -> dict[str, Any]:
    """What a generic Avro consumer gets: a dict, arrays as lists."""
    out = {name: getattr(record, name) for name in _fields(type(record))}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def _consume_with_confluent_only(
    bootstrap: str, url: str, topics: list[str], group: str
) -> dict[str, tuple[bytes, Any]]:
    """A registry-aware consumer with no project code: raw bytes and decoded value per topic."""
    client = SchemaRegistryClient({"url": url})
    deserialize = AvroDeserializer(client)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(topics)
    got: dict[str, tuple[bytes, Any]] = {}
    try:
        for _ in range(240):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                if len(got) == len(topics):
                    break
                continue
            ctx = SerializationContext(msg.topic(), MessageField.VALUE)
            got[msg.topic()] = (msg.value(), deserialize(msg.value(), ctx))
    finally:
        consumer.close()
        client.close()
    return got


def test_a_confluent_consumer_decodes_every_topic_with_the_registry_schemas(
    test_settings: Settings, kafka_bootstrap: str, registry_url: str, unique: str
) -> None:
    settings = test_settings.model_copy(update={"schema_registry_url": registry_url})
    create_topics(settings)
    sent = _samples(settings.topic_prefix)
    with _project_codec(settings) as codec:
        producer = make_producer(settings)
        for name, record in sent.items():
            value = codec.encode(record)
            producer.produce(settings.topic(name), key=b"7", value=value, timestamp=T0)
        assert producer.flush(10) == 0

        topics = [settings.topic(name) for name in TOPIC_RECORDS]
        got = _consume_with_confluent_only(kafka_bootstrap, registry_url, topics, f"g{unique}")
        assert sorted(got) == sorted(topics)
        with SchemaRegistryClient({"url": registry_url}) as client:
            for name, record in sent.items():
                raw, value = got[settings.topic(name)]
                assert value == _as_dict(record), name
                _same_bytes_as_confluent(client, settings.topic(name), record, raw)
                assert codec.decode(raw, type(record)) == record  # the project reads it too


def _same_bytes_as_confluent(
    client: SchemaRegistryClient, topic: str, record: Any, raw: bytes
) -> None:
    """The frame names the id the registry holds under the topic's subject, and the bytes are
    byte for byte what confluent-kafka's own serializer writes for that subject."""
    latest = client.get_latest_version(f"{topic}-value")
    assert raw[:5] == b"\x00" + latest.schema_id.to_bytes(4, "big"), topic
    serialize = AvroSerializer(
        client,
        latest.schema.schema_str,
        lambda rec, _ctx: _as_dict(rec),
        {"auto.register.schemas": False, "use.latest.version": True},
    )
    assert serialize(record, SerializationContext(topic, MessageField.VALUE)) == raw, topic


def test_the_project_decodes_a_newer_version_another_producer_registered(
    test_settings: Settings, registry_url: str
) -> None:
    settings = test_settings.model_copy(update={"schema_registry_url": registry_url})
    v2 = copy.deepcopy(self_contained(RequestEvent))
    v2["fields"].append({"name": "locale", "type": "string", "default": "und"})
    topic = settings.topic("requests")
    body = _as_dict(RequestEvent("r2", 8, T0, "feed", (4,))) | {"locale": "pt-BR"}
    with _project_codec(settings) as codec, SchemaRegistryClient({"url": registry_url}) as client:
        serialize = AvroSerializer(client, json.dumps(v2))  # registers v2 under the subject
        data = serialize(body, SerializationContext(topic, MessageField.VALUE))
        assert client.get_versions(f"{topic}-value") == [1, 2]  # BACKWARD accepted it
        assert codec.decode(data, RequestEvent) == RequestEvent("r2", 8, T0, "feed", (4,))


def test_an_incompatible_schema_change_is_refused_at_startup_naming_the_subject(
    test_settings: Settings, registry_url: str
) -> None:
    settings = test_settings.model_copy(update={"schema_registry_url": registry_url})
    subject = f"{settings.topic('impressions')}-value"
    # the subject's latest version lacks `label`, which the local schema needs (no default):
    # the local schema cannot read data written with it, so BACKWARD refuses it
    older = copy.deepcopy(self_contained(ImpressionEvent))
    older["fields"] = [f for f in older["fields"] if f["name"] != "label"]
    with SchemaRegistryClient({"url": registry_url}) as client:
        client.register_schema(subject, Schema(json.dumps(older), "AVRO"))
        with pytest.raises(IncompatibleSchema, match=re.escape(repr(subject))):
            make_codec(settings)
        assert client.get_versions(subject) == [1]  # nothing registered over it
