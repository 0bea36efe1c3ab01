"""The registry-backed codec over a fake schema registry (no network): subjects per topic, ids
the registry assigns in the frame, writer schemas cached by id (one registry request per new
id, none per message), incompatible schemas refused at startup naming the subject, and the
offline fallback (no registry URL: the private ids, no registry client built at all).

The real registry and a consumer written only with confluent-kafka:
tests/integration/test_schema_registry.py.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections import Counter
from typing import Any

import fastavro
import numpy as np
import pytest
from confluent_kafka.schema_registry import RegisteredSchema, Schema
from confluent_kafka.schema_registry.error import SchemaRegistryError

import streams.codecs
from schemas.codec import Codec
from schemas.errors import SchemaError, UnknownSchema
from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    PairEmbedding,
    ProposalBatch,
    RequestEvent,
)
from schemas.registry import default_schemas
from schemas.remote_registry import (
    IncompatibleSchema,
    RegistryUnavailable,
    RemoteSchemas,
    self_contained,
)
from streams.codecs import make_codec, subjects
from streams.live.batch_guard import INFRA_ERRORS
from streams.settings import Settings
from streams.topics import TOPIC_RECORDS, TOPICS

T0 = 1_700_000_000_000
URL = "http://registry.invalid:8081"
FIRST_ID = 100  # far from the private ids 1-9, so a test cannot pass on them by accident


class FakeRegistry:
    """Confluent registry semantics the codec relies on: one id per distinct schema text,
    versions per subject, 404s for unknown subjects and ids. Counts every call."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.ids: dict[str, int] = {}  # schema text -> id
        self.versions: dict[str, list[str]] = {}  # subject -> schema texts
        self.incompatible: set[str] = set()  # subjects whose check fails
        self.down = False
        self.built: list[dict[str, Any]] = []  # the configs a client was built with

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if self.down:
            raise ConnectionError("connection refused")

    def lookup_schema(self, subject_name: str, schema: Schema) -> RegisteredSchema:
        self._call("lookup_schema")
        texts = self.versions.get(subject_name, [])
        if schema.schema_str not in texts:
            raise SchemaRegistryError(404, 40403, f"not found under {subject_name}")
        sid = self.ids[schema.schema_str]
        version = texts.index(schema.schema_str) + 1
        return RegisteredSchema(
            subject=subject_name, version=version, schema_id=sid, guid=None, schema=schema
        )

    def test_compatibility(self, subject_name: str, schema: Schema) -> bool:
        self._call("test_compatibility")
        if not self.versions.get(subject_name):
            raise SchemaRegistryError(404, 40401, f"subject {subject_name} not found")
        return subject_name not in self.incompatible

    def register_schema(self, subject_name: str, schema: Schema) -> int:
        self._call("register_schema")
        sid = self.ids.setdefault(schema.schema_str, FIRST_ID + len(self.ids))
        self.versions.setdefault(subject_name, []).append(schema.schema_str)
        return sid

    def close(self) -> None:
        self.calls["close"] += 1

    def get_schema(self, schema_id: int) -> Schema:
        self._call("get_schema")
        for text, sid in self.ids.items():
            if sid == schema_id:
                return Schema(text, "AVRO")
        raise SchemaRegistryError(404, 40403, f"schema {schema_id} not found")


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRegistry:
    registry = FakeRegistry()

    def client(conf: dict[str, Any]) -> FakeRegistry:
        registry.built.append(conf)
        return registry

    monkeypatch.setattr(streams.codecs, "SchemaRegistryClient", client)
    return registry


def settings(url: str = URL) -> Settings:
    return Settings(schema_registry_url=url, topic_prefix="unit")


def samples() -> dict[str, Any]:
    vec = np.arange(8, dtype=np.float16).tobytes()
    return {
        "requests": RequestEvent("r1", 7, T0, "feed", (1, 2, 3)),
        "impressions": ImpressionEvent("r1", 7, 2, T0, 1, 1),
        "speculated": ProposalBatch("r1", 7, T0, 3, (1, 2), ("candidates", "candidates")),
        "verified": ProposalBatch(
            "r1", 7, T0, 3, (1,), ("candidates",), (0.5,), (5,), (1,), (T0 - 1,)
        ),
        "embeddings": EmbeddingBatch("r1", 7, T0, "fm-1", "FLOAT16", 4, (1, 2), vec),
        "dead-letter": DeadLetter("unit.requests", 0, 12, "decode_error", "boom", b"k", b"v", T0),
    }


def test_every_avro_topic_has_a_record_type_and_a_subject() -> None:
    assert set(TOPIC_RECORDS) == set(TOPICS) - {"scores"}  # scores carries JSON
    assert subjects(settings()) == {f"unit.{t}-value": rt for t, rt in TOPIC_RECORDS.items()}


def test_no_registry_url_is_the_offline_fallback_with_the_private_ids(fake: FakeRegistry) -> None:
    codec = make_codec(settings(url=""))
    assert codec.schemas is default_schemas()
    data = codec.encode(samples()["requests"])
    assert data[:5] == b"\x00\x00\x00\x00\x01"  # private id 1, as before the registry existed
    assert Codec().decode(data) == samples()["requests"]
    assert fake.built == [] and not fake.calls


def test_startup_registers_one_subject_per_topic_and_frames_the_registry_ids(
    fake: FakeRegistry,
) -> None:
    codec = make_codec(settings())
    assert fake.built == [{"url": URL}]
    assert set(fake.versions) == set(subjects(settings()))
    # ProposalBatch is one schema text on two subjects: one id, as in Confluent's registry
    assert fake.versions["unit.speculated-value"] == fake.versions["unit.verified-value"]
    for topic, record in samples().items():
        data = codec.encode(record)
        sid = fake.ids[fake.versions[f"unit.{topic}-value"][0]]
        assert sid >= FIRST_ID and data[:5] == b"\x00" + sid.to_bytes(4, "big")
        assert codec.decode(data, type(record)) == record
    assert fake.calls["get_schema"] == 0  # own schemas are known from the startup
    again = Counter(fake.calls)
    make_codec(settings())  # a second process: looks the schemas up, registers nothing new
    assert fake.calls["register_schema"] == again["register_schema"]
    assert fake.calls["lookup_schema"] == again["lookup_schema"] + len(TOPIC_RECORDS)


def _v2_request_event() -> dict[str, Any]:
    raw = copy.deepcopy(self_contained(RequestEvent))
    raw["fields"].append({"name": "locale", "type": "string", "default": "und"})
    return raw


def test_a_new_writer_id_costs_one_registry_request_then_none(fake: FakeRegistry) -> None:
    codec = make_codec(settings())
    # another producer registered v2 (a defaulted field more) and wrote with its id
    v2 = _v2_request_event()
    v2_id = fake.register_schema("unit.requests-value", Schema(json.dumps(v2), "AVRO"))
    body = {"request_id": "r9", "user_id": 9, "event_time_ms": T0, "surface": "feed"}
    body |= {"candidates": [4, 5], "locale": "pt-BR"}
    buf = io.BytesIO()
    buf.write(b"\x00" + v2_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v2, {}), body)
    before = fake.calls["get_schema"]
    for _ in range(5):  # resolved to the local reader schema: the extra field is skipped
        assert codec.decode(buf.getvalue(), RequestEvent) == RequestEvent(
            "r9", 9, T0, "feed", (4, 5)
        )
    assert fake.calls["get_schema"] == before + 1


def test_an_unknown_id_is_refused_and_remembered(fake: FakeRegistry) -> None:
    codec = make_codec(settings())
    frame = b"\x00" + (9999).to_bytes(4, "big") + b"\x02"
    for _ in range(3):
        with pytest.raises(UnknownSchema, match="9999 is not in the registry"):
            codec.decode(frame)
    assert fake.calls["get_schema"] == 1


def test_an_unreachable_registry_is_an_infra_error_not_a_bad_message(fake: FakeRegistry) -> None:
    codec = make_codec(settings())
    fake.register_schema("other-value", Schema(json.dumps(_v2_request_event()), "AVRO"))
    fake.down = True
    frame = b"\x00" + (FIRST_ID + len(fake.ids) - 1).to_bytes(4, "big") + b"\x02"
    with pytest.raises(RegistryUnavailable) as caught:
        codec.decode(frame)
    assert not isinstance(caught.value, SchemaError)  # never dead-lettered
    assert isinstance(caught.value, INFRA_ERRORS)  # the agent's batch is retried
    assert codec.decode(codec.encode(samples()["impressions"])) == samples()["impressions"]
    with pytest.raises(RegistryUnavailable, match="looking up"):
        make_codec(settings())  # a startup without the registry fails, loudly
    assert fake.calls["close"] == 1  # and leaves no connection behind


def test_an_incompatible_local_schema_fails_the_startup_naming_the_subject(
    fake: FakeRegistry,
) -> None:
    fake.register_schema("unit.impressions-value", Schema('{"type": "string"}', "AVRO"))
    fake.incompatible.add("unit.impressions-value")
    with pytest.raises(IncompatibleSchema, match=re.escape("'unit.impressions-value'")) as caught:
        make_codec(settings())
    assert caught.value.record_type is ImpressionEvent
    assert len(fake.versions["unit.impressions-value"]) == 1  # nothing registered over it


def test_a_conflict_on_register_is_the_same_clear_error() -> None:
    class Refusing(FakeRegistry):
        def register_schema(self, subject_name: str, schema: Schema) -> int:
            raise SchemaRegistryError(409, 409, f"incompatible schema for {subject_name}")

    with pytest.raises(IncompatibleSchema, match=re.escape("subject 'unit.requests-value'")):
        RemoteSchemas(Refusing(), {"unit.requests-value": RequestEvent})


def test_a_type_on_no_topic_is_not_encoded_with_a_made_up_id(fake: FakeRegistry) -> None:
    codec = make_codec(settings())
    pair = PairEmbedding.from_array(7, 2, T0, "fm-1", np.ones(4, np.float32))
    with pytest.raises(UnknownSchema, match="no schema registry subject carries PairEmbedding"):
        codec.encode(pair)


@pytest.mark.parametrize("record_type", [EmbeddingBatch, RequestEvent, DeadLetter])
def test_registered_schemas_are_self_contained(record_type: type) -> None:
    raw = self_contained(record_type)
    assert "__fastavro" not in json.dumps(raw) and "__named" not in json.dumps(raw)
    fastavro.parse_schema(raw, {})  # no named type of another file needed
