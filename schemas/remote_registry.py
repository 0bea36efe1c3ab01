"""Schemas from a Confluent-compatible schema registry (ids the registry assigns).

:class:`RemoteSchemas` is a :class:`schemas.registry.SchemaSource` for
:class:`schemas.codec.Codec`: one *subject* per topic (``<topic>-value``, Confluent's
TopicNameStrategy). When built (a process's startup) it registers, or looks up, the local
schema of each subject's record type, sent self-contained (named types such as
``solaris.v1.VectorDtype`` expanded inline), after checking it against the subject's latest
version with the subject's compatibility rule (BACKWARD by default); an incompatible schema
fails the startup with :class:`IncompatibleSchema`, naming the subject.

Encoding then writes the registry's id in the Confluent frame (magic ``0`` + 4-byte id + Avro
body); decoding resolves the writer schema of the frame's id, fetched from the registry the
first time the id is seen (a schema another producer registered) and cached by id: after that
every lookup is a dict hit, no network call per message. An id the registry does not know is
cached too, as unknown (a corrupt frame must not cost a request per message).

The client is ``confluent_kafka.schema_registry.SchemaRegistryClient`` or anything with the
same four methods (tests use a fake).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import fastavro
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.error import SchemaRegistryError
from fastavro.schema import expand_schema

from schemas.errors import UnknownSchema
from schemas.registry import ENTRIES, SchemaEntry, default_schemas

#: unknown ids remembered at most (then forgotten, oldest first)
MAX_UNKNOWN_IDS = 1024
_NOT_FOUND = 404


class RegistryClient(Protocol):
    """The part of ``SchemaRegistryClient`` used here."""

    def lookup_schema(self, subject_name: str, schema: Schema) -> Any: ...

    def test_compatibility(self, subject_name: str, schema: Schema) -> bool: ...

    def register_schema(self, subject_name: str, schema: Schema) -> int: ...

    def get_schema(self, schema_id: int) -> Schema: ...


class RegistryError(Exception):
    """The schema registry refused or could not be reached (not a message's fault, so not a
    :class:`schemas.errors.SchemaError`: nothing is dead-lettered for it)."""


class RegistryUnavailable(RegistryError):
    """The registry could not be reached or answered with an error."""


class IncompatibleSchema(RegistryError):
    """The local schema of a subject breaks the subject's compatibility rule."""

    def __init__(self, subject: str, record_type: type, detail: str) -> None:
        super().__init__(
            f"schema registry subject {subject!r}: the local {record_type.__name__} schema is "
            f"not compatible with the subject's latest version ({detail}); register a "
            "compatible version (e.g. a new field with a default) or use a new topic"
        )
        self.subject = subject
        self.record_type = record_type


def _strip_parse_marks(schema: Any) -> Any:
    """``expand_schema`` of a parsed schema without fastavro's bookkeeping keys."""
    if isinstance(schema, dict):
        return {
            k: _strip_parse_marks(v)
            for k, v in schema.items()
            if k not in ("__fastavro_parsed", "__named_schemas")
        }
    if isinstance(schema, list):
        return [_strip_parse_marks(v) for v in schema]
    return schema


def self_contained(record_type: type) -> dict[str, Any]:
    """The local (newest) schema of ``record_type`` with every named type it uses inline: what
    the registry stores (Apicurio refuses a bare reference to a type of another file)."""
    local = default_schemas()
    parsed = local.schema(local.reader_id(record_type))
    return _strip_parse_marks(expand_schema(parsed))


def _short_name(schema: Mapping[str, Any]) -> str:
    return str(schema.get("name", "")).rsplit(".", 1)[-1]


class RemoteSchemas:
    """Per-id writer schemas from a registry, and per record type the registry id of the local
    schema (encode and reader side). ``subjects`` maps subject name to record type."""

    def __init__(self, client: RegistryClient, subjects: Mapping[str, type]) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._by_id: dict[int, SchemaEntry] = {}
        self._parsed: dict[int, Any] = {}
        self._unknown: dict[int, str] = {}
        self._readers: dict[type, int] = {}
        #: record type of each local Avro name (a writer schema is mapped by its short name)
        self._types = {
            _short_name(default_schemas().schema(e.wire_id)): e.record_type for e in ENTRIES
        }
        #: subject -> registry id of the local schema, as registered or looked up at startup
        self.subject_ids: dict[str, int] = {}
        for subject, record_type in subjects.items():
            wire_id = self._register(subject, record_type)
            self.subject_ids[subject] = wire_id
            self._readers[record_type] = wire_id

    def _register(self, subject: str, record_type: type) -> int:
        raw = self_contained(record_type)
        schema = Schema(json.dumps(raw), "AVRO")
        try:
            wire_id = int(self.client.lookup_schema(subject, schema).schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code != _NOT_FOUND:
                raise RegistryUnavailable(f"looking up {subject!r}: {exc}") from exc
            wire_id = self._check_and_register(subject, record_type, schema)
        except Exception as exc:  # the client's transport errors (httpx)
            raise RegistryUnavailable(f"looking up {subject!r}: {exc!r}") from exc
        self._remember(wire_id, record_type, raw)
        return wire_id

    def _check_and_register(self, subject: str, record_type: type, schema: Schema) -> int:
        try:
            compatible = self.client.test_compatibility(subject, schema)
        except SchemaRegistryError as exc:
            if exc.http_status_code != _NOT_FOUND:  # 404: no version yet, nothing to break
                raise RegistryUnavailable(f"checking {subject!r}: {exc}") from exc
            compatible = True
        if not compatible:
            raise IncompatibleSchema(subject, record_type, "compatibility check failed")
        try:
            return int(self.client.register_schema(subject, schema))
        except SchemaRegistryError as exc:
            if exc.http_status_code == 409:
                raise IncompatibleSchema(subject, record_type, str(exc)) from exc
            raise RegistryUnavailable(f"registering {subject!r}: {exc}") from exc

    def _remember(self, wire_id: int, record_type: type, raw: dict[str, Any]) -> None:
        entry = SchemaEntry(wire_id, record_type, f"registry:{wire_id}")
        parsed = fastavro.parse_schema(raw, {})
        with self._lock:
            self._parsed[wire_id] = parsed
            self._by_id[wire_id] = entry

    def _fetch(self, wire_id: int) -> SchemaEntry:
        """The first sight of an id: one registry request, then cached (also when unknown)."""
        with self._lock:
            if wire_id in self._by_id:
                return self._by_id[wire_id]
            if wire_id in self._unknown:
                raise UnknownSchema(self._unknown[wire_id])
            try:
                text = self.client.get_schema(wire_id).schema_str
            except SchemaRegistryError as exc:
                if exc.http_status_code != _NOT_FOUND:
                    raise RegistryUnavailable(f"fetching schema id {wire_id}: {exc}") from exc
                return self._forget(wire_id, f"schema id {wire_id} is not in the registry")
            except Exception as exc:  # the client's transport errors (httpx)
                raise RegistryUnavailable(f"fetching schema id {wire_id}: {exc!r}") from exc
            try:
                raw = json.loads(text or "null")
                record_type = self._types.get(_short_name(raw)) if isinstance(raw, dict) else None
                parsed = fastavro.parse_schema(raw, {}) if record_type is not None else None
            except Exception as exc:  # not JSON, not Avro, or with references it cannot resolve
                return self._forget(wire_id, f"schema id {wire_id} does not parse: {exc!r}")
            if record_type is None:
                return self._forget(wire_id, f"schema id {wire_id} is no SOLARIS record")
            entry = SchemaEntry(wire_id, record_type, f"registry:{wire_id}")
            self._parsed[wire_id] = parsed
            self._by_id[wire_id] = entry
            return entry

    def _forget(self, wire_id: int, why: str) -> SchemaEntry:
        if len(self._unknown) >= MAX_UNKNOWN_IDS:
            del self._unknown[next(iter(self._unknown))]
        self._unknown[wire_id] = why
        raise UnknownSchema(why)

    def entry(self, wire_id: int) -> SchemaEntry:
        entry = self._by_id.get(wire_id)
        return entry if entry is not None else self._fetch(wire_id)

    def schema(self, wire_id: int) -> Any:
        parsed = self._parsed.get(wire_id)
        if parsed is None:
            self._fetch(wire_id)
            parsed = self._parsed[wire_id]
        return parsed

    def close(self) -> None:
        """Close the client's connections (a process's codec keeps them for new ids)."""
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    def reader_id(self, record_type: type) -> int:
        wire_id = self._readers.get(record_type)
        if wire_id is None:
            raise UnknownSchema(
                f"no schema registry subject carries {record_type.__name__} "
                f"(subjects: {sorted(self.subject_ids)})"
            )
        return wire_id
