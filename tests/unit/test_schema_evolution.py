"""Schema evolution: a v2 schema with a new defaulted field reads v1 messages, and a v1 reader
skips v2's extra field (Avro writer → reader schema resolution in the codec)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from schemas.codec import Codec
from schemas.errors import UnknownSchema
from schemas.records import RequestEvent
from schemas.registry import SchemaEntry, SchemaSet, load_schema_json

T0 = 1_704_067_200_000
V1, V2 = 1, 100


@dataclass(frozen=True, slots=True)
class RequestEventV2(RequestEvent):
    """What a later release's record would look like: one new field with a default."""

    locale: str = ""  # the schema default ("und") must come from resolution, not from here


def v2_schema() -> dict:
    raw = copy.deepcopy(load_schema_json("request_event.avsc"))
    raw["fields"].append({"name": "locale", "type": "string", "default": "und"})
    return raw


def schemas(record_type: type, reader: int) -> SchemaSet:
    entries = (
        SchemaEntry(V1, record_type, "request_event.avsc"),
        SchemaEntry(V2, record_type, "request_event.avsc"),
    )
    return SchemaSet(entries, {record_type: reader}, {V2: v2_schema()})


def test_v2_reader_reads_v1_messages_with_the_default() -> None:
    v1_bytes = Codec().encode(RequestEvent("r1", 7, T0, "feed", (1, 2, 3)))  # today's writer
    got = Codec(schemas=schemas(RequestEventV2, V2)).decode(v1_bytes)
    assert got == RequestEventV2("r1", 7, T0, "feed", (1, 2, 3), "und")


def test_v1_reader_skips_the_v2_field() -> None:
    v2_codec = Codec(schemas=schemas(RequestEventV2, V2))
    v2_bytes = v2_codec.encode(RequestEventV2("r2", 8, T0, "feed", (4,), "pt-BR"))
    assert v2_bytes[1:5] == V2.to_bytes(4, "big")  # written with the v2 schema's wire id
    v1_reader = Codec(schemas=schemas(RequestEvent, V1))
    assert v1_reader.decode(v2_bytes) == RequestEvent("r2", 8, T0, "feed", (4,))
    assert v2_codec.decode(v2_bytes).locale == "pt-BR"


def test_a_writer_schema_the_reader_does_not_know_is_refused() -> None:
    v2_bytes = Codec(schemas=schemas(RequestEventV2, V2)).encode(
        RequestEventV2("r3", 9, T0, "feed", (5,), "de")
    )
    with pytest.raises(UnknownSchema):
        Codec().decode(v2_bytes)  # today's registry has no wire id 100
