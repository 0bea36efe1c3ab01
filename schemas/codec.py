"""Binary codec for Kafka messages: a 5-byte header + an Avro (schemaless) body.

Header: magic byte ``0x00`` then the schema's wire id as a big-endian uint32: the Confluent wire
format. The ids are the private ones of :mod:`schemas.registry` (offline fallback) or, with
``schemas.remote_registry.RemoteSchemas``, the ids a schema registry assigned. No pickle.
Every decode validates: header, Avro body (fully consumed), then field rules.
"""

from __future__ import annotations

import io
import struct
from functools import cache
from typing import Any, TypeVar, cast

import fastavro

from schemas.errors import BadHeader, DecodeError, InvalidField, SchemaError, WrongRecordType
from schemas.limits import Limits
from schemas.records import EmbeddingBatch, NeighbourList, ProposalBatch, RequestEvent
from schemas.registry import SchemaSource, default_schemas
from schemas.validation import validate

MAGIC = 0
_HEADER = struct.Struct(">BI")
T = TypeVar("T")

# Avro arrays decode to lists; records keep tuples so they stay hashable and immutable.
_TUPLE_FIELDS: dict[type, tuple[str, ...]] = {
    RequestEvent: ("candidates",),
    NeighbourList: ("neighbours", "weights"),
    ProposalBatch: (
        "item_ids",
        "strategies",
        "scores",
        "history_items",
        "history_labels",
        "history_times_ms",
        "prior_counts",
        "pair_counts",
    ),
    EmbeddingBatch: ("item_ids",),
}


class Codec:
    """Encode and decode SOLARIS records. Thread-safe; holds no per-message state."""

    def __init__(self, limits: Limits | None = None, schemas: SchemaSource | None = None) -> None:
        self.limits = limits or Limits()
        self.schemas: SchemaSource = schemas or default_schemas()

    def encode(self, record: Any) -> bytes:
        """Validate and encode ``record``; raises :class:`SchemaError` subclasses."""
        validate(record, self.limits)
        wire_id = self.schemas.reader_id(type(record))
        buf = io.BytesIO()
        buf.write(_HEADER.pack(MAGIC, wire_id))
        record_type: type = type(record)
        body = {name: getattr(record, name) for name in _fields(record_type)}
        try:
            fastavro.schemaless_writer(buf, self.schemas.schema(wire_id), body)
        except (ValueError, TypeError, OverflowError) as exc:
            raise InvalidField(type(record).__name__, "?", f"cannot encode: {exc}") from exc
        return buf.getvalue()

    def decode(self, data: bytes | None, expect: type[T] | None = None) -> T:
        """Decode one message; ``expect`` restricts the accepted record type."""
        if data is None or len(data) < _HEADER.size:
            raise BadHeader(f"message of {0 if data is None else len(data)} bytes has no header")
        magic, wire_id = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise BadHeader(f"magic byte {magic:#x}, expected {MAGIC:#x}")
        entry = self.schemas.entry(wire_id)
        if expect is not None and entry.record_type is not expect:
            raise WrongRecordType(f"got {entry.record_type.__name__}, expected {expect.__name__}")
        writer = self.schemas.schema(wire_id)
        reader_id = self.schemas.reader_id(entry.record_type)
        reader = None if reader_id == wire_id else self.schemas.schema(reader_id)
        buf = io.BytesIO(data)
        buf.seek(_HEADER.size)
        try:
            body = fastavro.schemaless_reader(buf, writer, reader)
        except SchemaError:
            raise
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise DecodeError(f"{entry.record_type.__name__}: corrupt Avro body: {exc!r}") from exc
        if buf.tell() != len(data):
            raise DecodeError(
                f"{entry.record_type.__name__}: {len(data) - buf.tell()} trailing bytes"
            )
        body = cast(dict[str, Any], body)
        for cls in entry.record_type.__mro__:
            for name in _TUPLE_FIELDS.get(cls, ()):
                body[name] = tuple(body[name])
        record = entry.record_type(**body)
        validate(record, self.limits)
        return cast(T, record)


@cache
def _fields(record_type: type) -> tuple[str, ...]:
    """Field names of a record class, base class first (slots of every class in the MRO)."""
    names: list[str] = []
    for cls in reversed(record_type.__mro__):
        names += [n for n in getattr(cls, "__slots__", ()) if n not in names]
    return tuple(names)
