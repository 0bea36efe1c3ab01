"""Recorded traffic: one Avro object-container file of RequestEvents and ImpressionEvents.

Format (version :data:`FORMAT_VERSION`):

* Avro object container file, ``deflate`` codec; its embedded schema is the union
  ``[solaris.v1.RequestEvent, solaris.v1.ImpressionEvent]`` built from the ``schemas/avro`` files,
  so any Avro reader can open it and ``replay`` produces the same records the pipeline consumes.
* Records are in event-time order; within one millisecond a request precedes its impressions.
  An impression's ``event_time_ms`` equals its request's: impressions are the labelled outcomes of
  the items the request showed (the label is known shortly after the request), so consumers must
  treat an impression as history only for requests strictly later in event time.
* File metadata ``solaris.traffic`` holds a JSON object: ``format_version``, ``dataset`` and the
  generator / converter parameters (seed included) given by the writer.
* The sync marker is derived from the metadata, so the same events and metadata give the same
  bytes (determinism tests compare files).

Writers validate every record (``schemas.validation``) and the ordering; readers validate again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import fastavro
import numpy as np

from models.data.columns import Impressions, Requests
from models.data.errors import TrafficFormatError
from schemas.errors import SchemaError
from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, Limits
from schemas.records import ImpressionEvent, RequestEvent
from schemas.registry import load_schema_json
from schemas.validation import validate

FORMAT_VERSION = 1
METADATA_KEY = "solaris.traffic"
_REQUEST = "solaris.v1.RequestEvent"
_IMPRESSION = "solaris.v1.ImpressionEvent"
_PROGRESS_EVERY = 4096

TrafficEvent = RequestEvent | ImpressionEvent


def traffic_schema() -> Any:
    """The parsed union schema of a traffic file, its field properties in sorted order.

    ``fastavro.parse_schema`` copies a field's ``doc``/``default``/``aliases`` in the iteration
    order of a set, i.e. of the process's hash seed, and the writer puts that schema in the
    file header: the same traffic written by two processes had different bytes, so the traffic
    cache name and the model-bundle key changed between runs (``simulate`` after ``evaluate``
    retrained about half the time).
    """
    parsed = fastavro.parse_schema(
        [load_schema_json("request_event.avsc"), load_schema_json("impression_event.avsc")]
    )
    for record in cast(list[dict[str, Any]], parsed):
        for f in cast(list[dict[str, Any]], record["fields"]):
            ordered = sorted(f.items())  # in place: the parsed schema keeps its identity
            f.clear()
            f.update(ordered)
    return parsed


@dataclass(frozen=True, slots=True)
class TrafficSummary:
    """What :func:`write_traffic` wrote."""

    path: str
    requests: int
    impressions: int
    users: int
    first_event_ms: int | None
    last_event_ms: int | None
    bytes: int


class _OrderChecker:
    """Enforces the file's ordering rules while events stream through the writer."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.last_ms: int | None = None
        self.requests: dict[str, tuple[int, int]] = {}  # request_id -> (user_id, event_time_ms)
        self.users: set[int] = set()
        self.impressions = 0
        self.first_ms: int | None = None

    def check(self, event: TrafficEvent) -> tuple[str, dict[str, Any]]:
        try:
            validate(event, self.limits)
        except SchemaError as exc:
            raise TrafficFormatError(f"invalid event {event!r}: {exc}") from exc
        t = event.event_time_ms
        if self.last_ms is not None and t < self.last_ms:
            raise TrafficFormatError(f"event time {t} < previous {self.last_ms}: not time-ordered")
        self.last_ms = t
        if self.first_ms is None:
            self.first_ms = t
        if isinstance(event, RequestEvent):
            if event.request_id in self.requests:
                raise TrafficFormatError(f"duplicate request_id {event.request_id!r}")
            self.requests[event.request_id] = (event.user_id, t)
            self.users.add(event.user_id)
            return _REQUEST, {
                "request_id": event.request_id,
                "user_id": event.user_id,
                "event_time_ms": t,
                "surface": event.surface,
                "candidates": list(event.candidates),
            }
        owner = self.requests.get(event.request_id)
        if owner is None or owner[0] != event.user_id:
            raise TrafficFormatError(
                f"impression of {event.request_id!r} before its request (or for another user)"
            )
        self.impressions += 1
        return _IMPRESSION, {
            "request_id": event.request_id,
            "user_id": event.user_id,
            "item_id": event.item_id,
            "event_time_ms": t,
            "position": event.position,
            "label": event.label,
        }


def write_traffic(
    path: Path | str,
    events: Iterable[TrafficEvent],
    metadata: dict[str, Any],
    progress: Callable[[int], None] | None = None,
    limits: Limits | None = None,
) -> TrafficSummary:
    """Write ``events`` (already in file order) to ``path``; return what was written.

    Raises :class:`TrafficFormatError` on an invalid record or an ordering violation (the
    partial file is removed). ``metadata`` must be JSON-serialisable; ``format_version`` is added.
    ``progress(n)`` is called with the number of events written since the previous call.
    Not idempotent on the file system: ``path`` is overwritten.
    """
    path = Path(path)
    meta = {"format_version": FORMAT_VERSION, **metadata}
    try:
        meta_json = json.dumps(meta, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise TrafficFormatError(f"metadata is not JSON-serialisable: {exc}") from exc
    checker = _OrderChecker(limits or Limits())

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        pending = 0
        for event in events:
            yield checker.check(event)
            pending += 1
            if progress is not None and pending >= _PROGRESS_EVERY:
                progress(pending)
                pending = 0
        if progress is not None and pending:
            progress(pending)

    sync = hashlib.blake2b(meta_json.encode(), digest_size=16).digest()
    try:
        with path.open("wb") as fh:
            fastavro.writer(
                fh,
                traffic_schema(),
                records(),
                codec="deflate",
                metadata={METADATA_KEY: meta_json},
                sync_marker=sync,
            )
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return TrafficSummary(
        str(path),
        len(checker.requests),
        checker.impressions,
        len(checker.users),
        checker.first_ms,
        checker.last_ms,
        path.stat().st_size,
    )


def _open_reader(fh: Any) -> Any:
    try:
        reader = fastavro.reader(fh, return_record_name=True)
    except Exception as exc:  # fastavro raises several types on a non-Avro file
        raise TrafficFormatError(f"not an Avro container file: {exc!r}") from exc
    meta = reader.metadata.get(METADATA_KEY)
    if meta is None:
        raise TrafficFormatError(f"Avro file without {METADATA_KEY!r} metadata: not traffic")
    try:
        version = json.loads(meta).get("format_version")
    except (ValueError, AttributeError) as exc:
        raise TrafficFormatError(f"{METADATA_KEY!r} metadata is not a JSON object") from exc
    if version != FORMAT_VERSION:
        raise TrafficFormatError(
            f"traffic format version {version}, this build reads {FORMAT_VERSION}"
        )
    return reader


def traffic_metadata(path: Path | str) -> dict[str, Any]:
    """The JSON metadata the writer stored (``format_version``, ``dataset``, parameters, seed)."""
    with Path(path).open("rb") as fh:
        return dict(json.loads(_open_reader(fh).metadata[METADATA_KEY]))


def _raw_records(path: Path | str) -> Iterator[tuple[str, dict[str, Any]]]:
    with Path(path).open("rb") as fh:
        reader = _open_reader(fh)
        try:
            for item in reader:
                if not (isinstance(item, tuple) and item[0] in (_REQUEST, _IMPRESSION)):
                    raise TrafficFormatError(f"unexpected record in traffic file: {item!r:.200}")
                yield item
        except TrafficFormatError:
            raise
        except Exception as exc:  # corrupt blocks surface as assorted fastavro/zlib errors
            raise TrafficFormatError(f"corrupt traffic file {path}: {exc!r}") from exc


def read_traffic(path: Path | str, limits: Limits | None = None) -> Iterator[TrafficEvent]:
    """Yield the file's events, in file order, as validated ``schemas.records`` dataclasses.

    Lazy and streaming (constant memory). Raises :class:`TrafficFormatError` on a corrupt file or
    an invalid record.
    """
    lim = limits or Limits()
    for name, rec in _raw_records(path):
        event: TrafficEvent
        if name == _REQUEST:
            rec["candidates"] = tuple(rec["candidates"])
            event = RequestEvent(**rec)
        else:
            event = ImpressionEvent(**rec)
        try:
            validate(event, lim)
        except SchemaError as exc:
            raise TrafficFormatError(f"invalid event in {path}: {exc}") from exc
        yield event


@dataclass(frozen=True, slots=True)
class Traffic:
    """A whole traffic file in columnar form, plus its metadata."""

    requests: Requests
    impressions: Impressions
    metadata: dict[str, Any]


def load_traffic(path: Path | str) -> Traffic:
    """Read a traffic file into :class:`Requests` + :class:`Impressions` (fast columnar path).

    Range rules (ids >= 0, times in range, labels in {0, 1}) are checked vectorised.
    """
    rid: list[str] = []
    ruser: list[int] = []
    rtime: list[int] = []
    cands: list[list[int]] = []
    index_of: dict[str, int] = {}
    imp_req: list[int] = []
    imp_item: list[int] = []
    imp_pos: list[int] = []
    imp_label: list[int] = []
    for name, rec in _raw_records(path):
        if name == _REQUEST:
            index_of[rec["request_id"]] = len(rid)
            rid.append(rec["request_id"])
            ruser.append(rec["user_id"])
            rtime.append(rec["event_time_ms"])
            cands.append(rec["candidates"])
        else:
            i = index_of.get(rec["request_id"], -1)
            if i < 0 or ruser[i] != rec["user_id"] or rtime[i] != rec["event_time_ms"]:
                raise TrafficFormatError(f"impression does not match a preceding request: {rec}")
            imp_req.append(i)
            imp_item.append(rec["item_id"])
            imp_pos.append(rec["position"])
            imp_label.append(rec["label"])
    requests = Requests.from_lists(rid, ruser, rtime, cands)
    impressions = Impressions.from_lists(imp_req, requests, imp_item, imp_pos, imp_label)
    _check_ranges(requests, impressions)
    return Traffic(requests, impressions, traffic_metadata(path))


def _check_ranges(requests: Requests, impressions: Impressions) -> None:
    times = requests.event_time_ms
    problems = {
        "negative user_id": bool(np.any(requests.user_id < 0)),
        "negative item id": bool(
            np.any(requests.candidates < 0) or np.any(impressions.item_id < 0)
        ),
        "event time out of range": bool(
            np.any((times < MIN_EVENT_TIME_MS) | (times >= MAX_EVENT_TIME_MS))
        ),
        "not time-ordered": bool(np.any(np.diff(times) < 0)),
        "negative position": bool(np.any(impressions.position < 0)),
        "label not 0/1": bool(np.any((impressions.label != 0) & (impressions.label != 1))),
    }
    bad = [name for name, failed in problems.items() if failed]
    if bad:
        raise TrafficFormatError(f"traffic file breaks rules: {', '.join(bad)}")


def load_requests(path: Path | str) -> Requests:
    """Requests of a traffic file (columnar; see :class:`Requests` for fields and dtypes)."""
    return load_traffic(path).requests


def load_impressions(path: Path | str) -> Impressions:
    """Impressions of a traffic file (columnar; see :class:`Impressions` for fields)."""
    return load_traffic(path).impressions
