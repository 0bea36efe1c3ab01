"""Schema registry: the ``.avsc`` files, their wire ids, and the record class of each.

Wire ids are part of the contract: never reuse or renumber one. A new version of a schema gets a
new file and a new id; consumers keep decoding old ids as long as they are listed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import fastavro

from schemas.errors import UnknownSchema
from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    NeighbourList,
    PairEmbedding,
    PairProposal,
    ProposalBatch,
    RequestEvent,
    UserAggregate,
)

AVRO_DIR = Path(__file__).with_name("avro")


@dataclass(frozen=True, slots=True)
class SchemaEntry:
    """One registered schema version."""

    wire_id: int
    record_type: type
    filename: str


# Order matters only for readability; ids are explicit. PairEmbedding must precede UserAggregate
# because the latter references the named type VectorDtype.
ENTRIES: tuple[SchemaEntry, ...] = (
    SchemaEntry(1, RequestEvent, "request_event.avsc"),
    SchemaEntry(2, ImpressionEvent, "impression_event.avsc"),
    SchemaEntry(3, PairProposal, "pair_proposal.avsc"),
    SchemaEntry(4, PairEmbedding, "pair_embedding.avsc"),
    SchemaEntry(5, UserAggregate, "user_aggregate.avsc"),
    SchemaEntry(6, NeighbourList, "neighbour_list.avsc"),
    SchemaEntry(7, DeadLetter, "dead_letter.avsc"),
    SchemaEntry(8, ProposalBatch, "proposal_batch.avsc"),
    SchemaEntry(9, EmbeddingBatch, "embedding_batch.avsc"),
    # v2: the recurrence inputs travel with the proposals (issue 23); id 8 is still decoded
    SchemaEntry(10, ProposalBatch, "proposal_batch_v2.avsc"),
)


def load_schema_json(filename: str) -> dict[str, Any]:
    """The raw JSON of one ``.avsc`` file."""
    with (AVRO_DIR / filename).open() as fh:
        return json.load(fh)


@cache
def parsed_schemas() -> dict[int, Any]:
    """Parsed fastavro schemas by wire id (named types shared across files)."""
    named: dict[str, Any] = {}
    out: dict[int, Any] = {}
    for entry in ENTRIES:
        out[entry.wire_id] = fastavro.parse_schema(load_schema_json(entry.filename), named)
    return out


@cache
def wire_id_of(record_type: type) -> int:
    """The newest wire id registered for ``record_type``."""
    ids = [e.wire_id for e in ENTRIES if e.record_type is record_type]
    if not ids:
        raise UnknownSchema(f"no schema registered for {record_type.__name__}")
    return max(ids)


def entry_for(wire_id: int) -> SchemaEntry:
    """The registry entry of ``wire_id``; raises :class:`UnknownSchema`."""
    for entry in ENTRIES:
        if entry.wire_id == wire_id:
            return entry
    raise UnknownSchema(f"unknown schema id {wire_id} (known: {[e.wire_id for e in ENTRIES]})")


class SchemaSource(Protocol):
    """What a :class:`schemas.codec.Codec` asks of its schemas, per message (dict lookups):
    :class:`SchemaSet` (the private ids) or ``schemas.remote_registry.RemoteSchemas`` (ids
    assigned by a Confluent-compatible schema registry)."""

    def entry(self, wire_id: int) -> SchemaEntry: ...

    def schema(self, wire_id: int) -> Any: ...

    def reader_id(self, record_type: type) -> int: ...


@dataclass(frozen=True)
class SchemaSet:
    """The schemas one codec knows: every writer version by wire id, and per record type the
    *reader* version its records are decoded into (default: the newest registered).

    Decoding resolves writer → reader schema (Avro schema resolution): a newer reader fills a
    field the writer lacked from its default; an older reader skips a field it does not know.
    ``inline`` maps wire ids to schema JSON for entries without a file (tests, tools).
    """

    entries: tuple[SchemaEntry, ...]
    reader_ids: dict[type, int] | None = None
    inline: dict[int, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        named: dict[str, Any] = {}
        parsed = {}
        for e in self.entries:
            raw = (self.inline or {}).get(e.wire_id) or load_schema_json(e.filename)
            parsed[e.wire_id] = fastavro.parse_schema(raw, named)
        readers: dict[type, int] = {}
        for e in self.entries:  # newest version per type, unless told otherwise
            readers[e.record_type] = max(readers.get(e.record_type, e.wire_id), e.wire_id)
        readers.update(self.reader_ids or {})
        # lookups on the decode hot path are dict hits
        object.__setattr__(self, "_parsed", parsed)
        object.__setattr__(self, "_by_id", {e.wire_id: e for e in self.entries})
        object.__setattr__(self, "_readers", readers)

    def entry(self, wire_id: int) -> SchemaEntry:
        entry: SchemaEntry | None = self._by_id.get(wire_id)  # type: ignore[attr-defined]
        if entry is None:
            raise UnknownSchema(
                f"unknown schema id {wire_id} (known: {[e.wire_id for e in self.entries]})"
            )
        return entry

    def schema(self, wire_id: int) -> Any:
        self.entry(wire_id)  # raises UnknownSchema
        return self._parsed[wire_id]  # type: ignore[attr-defined]

    def reader_id(self, record_type: type) -> int:
        """The wire id whose schema ``record_type`` is decoded into (and encoded with)."""
        wire_id: int | None = self._readers.get(record_type)  # type: ignore[attr-defined]
        if wire_id is None:
            raise UnknownSchema(f"no schema registered for {record_type.__name__}")
        return wire_id


@cache
def default_schemas() -> SchemaSet:
    """Every schema of :data:`ENTRIES`, newest version as reader."""
    return SchemaSet(ENTRIES)
