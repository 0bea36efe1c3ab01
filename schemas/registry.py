"""Schema registry: the ``.avsc`` files, their wire ids, and the record class of each.

Wire ids are part of the contract: never reuse or renumber one. A new version of a schema gets a
new file and a new id; consumers keep decoding old ids as long as they are listed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

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
