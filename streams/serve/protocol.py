"""The feature server's wire forms, pure: request parsing, the JSON answer, the binary answer.

Request (``POST /v1/features``, JSON): ``{"user_id": int, "item_ids": [int, ...],
"event_time_ms": int}``. Ids are non-negative 64-bit integers, the event time is in the
schemas' bounds (:mod:`schemas.limits`), at most ``max_items`` items (``SOLARIS_MAX_CANDIDATES``).
Anything else is a :class:`BadRequest` (HTTP 400 with a JSON error body).

Answer, JSON (default): ``tiers`` (names, :data:`store.tiers.TIER_NAMES`), ``tier_codes``,
``ages_ms``, ``vectors`` (n lists of ``dim`` floats: the float32 values, exactly), ``dim``,
``n``, ``model_version`` (the served FM version, null when any is accepted) and ``read_error``:
null, or why the lookup was cut short (``timeout``, ``store_error``, ``internal_error``; as in
process, the rows it could not read are *missing*, values found before a late second round trip
are kept).

Answer, binary (``Accept: application/octet-stream``), little-endian, every array aligned to
its element size from the start of the body::

    offset            size     field
    0                 4        magic b"SOLF"
    4                 2        uint16 format version (1)
    6                 2        uint16 flags (bit 0: the lookup was cut short: read_error)
    8                 4        uint32 n (items, in request order)
    12                4        uint32 dim
    16                n        uint8 tier codes
    16 + n            pad      zero bytes, pad = (-n) mod 8
    A = 16 + n + pad  8 n      int64 ages in ms (-1 where missing)
    A + 8 n           4 n dim  float32 vectors, row-major (zeros where missing)
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from store.reader import Lookup
from store.tiers import TIER_NAMES

JSON_TYPE = "application/json"
BINARY_TYPE = "application/octet-stream"
MAGIC = b"SOLF"
FORMAT_VERSION = 1
HEADER = struct.Struct("<4sHHII")  #: magic, version, flags, n, dim
FLAG_READ_FAILED = 1
MAX_ID = 2**63 - 1
#: why a lookup served nothing, by the reader's counter that moved (``ReaderStats`` fields)
READ_ERRORS = ("timeout", "store_error", "internal_error")


class BadRequest(ValueError):
    """A request the server refuses (400), with the field at fault when there is one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def body(self) -> dict[str, Any]:
        return {"error": "bad_request", "message": self.message, "field": self.field}


@dataclass(frozen=True, slots=True)
class FeatureRequest:
    user_id: int
    item_ids: list[int]
    event_time_ms: int


def _int(value: Any, field: str, low: int, high: int) -> int:
    """``value`` if it is a JSON integer in ``[low, high]`` (not a bool, not a float)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{field} must be an integer, got {type(value).__name__}", field)
    if not low <= value <= high:
        raise BadRequest(f"{field} must be in [{low}, {high}], got {value}", field)
    return value


def max_body_bytes(max_items: int) -> int:
    """The largest body a valid request can have: ``max_items`` 19-digit ids, each with its
    separator and an indentation of up to 11 spaces, plus the object around them."""
    return 1024 + 32 * max_items


def parse_request(body: bytes, max_items: int) -> FeatureRequest:
    """The request in ``body`` (JSON), or :class:`BadRequest` saying what is wrong. A body
    larger than any valid request, or nested deeper than the parser's recursion limit, is
    refused before it can cost more than reading it."""
    limit = max_body_bytes(max_items)
    if len(body) > limit:
        raise BadRequest(f"body is {len(body)} bytes, more than {limit} for {max_items} items")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    except RecursionError:  # e.g. "[[[[...": no valid request nests more than two levels
        raise BadRequest("body nests too deep to be a request") from None
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object")
    missing = [k for k in ("user_id", "item_ids", "event_time_ms") if k not in doc]
    if missing:
        raise BadRequest(f"missing field(s): {', '.join(missing)}", missing[0])
    user = _int(doc["user_id"], "user_id", 0, MAX_ID)
    t = _int(doc["event_time_ms"], "event_time_ms", MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS - 1)
    items = doc["item_ids"]
    if not isinstance(items, list):
        raise BadRequest("item_ids must be a list of integers", "item_ids")
    if len(items) > max_items:
        raise BadRequest(f"item_ids has {len(items)} items, more than {max_items}", "item_ids")
    ids = [_int(v, f"item_ids[{k}]", 0, MAX_ID) for k, v in enumerate(items)]
    return FeatureRequest(user, ids, t)


def wants_binary(accept: str | None) -> bool:
    """Whether the ``Accept`` header prefers the binary form: its best media range (highest
    q, the first among equals) is ``application/octet-stream``. Anything else gets JSON."""
    best, best_q = "", -1.0
    for part in (accept or "").split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > best_q:
            best, best_q = media.lower(), q
    return best == BINARY_TYPE and best_q > 0


def json_answer(
    found: Lookup, dim: int, model_version: str | None, read_error: str | None
) -> dict[str, Any]:
    """The JSON answer's document (see the module docstring)."""
    codes = found.tiers.tolist()
    return {
        "n": len(codes),
        "dim": dim,
        "tiers": [TIER_NAMES[c] for c in codes],
        "tier_codes": codes,
        "ages_ms": found.ages_ms.tolist(),
        "vectors": found.vectors.tolist(),
        "model_version": model_version,
        "read_error": read_error,
    }


def encode_json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def encode_binary(found: Lookup, dim: int, read_error: str | None) -> bytes:
    """The binary answer (see the module docstring)."""
    n = len(found.tiers)
    flags = FLAG_READ_FAILED if read_error else 0
    return b"".join(
        (
            HEADER.pack(MAGIC, FORMAT_VERSION, flags, n, dim),
            np.asarray(found.tiers, dtype="<u1").tobytes(),
            bytes((-n) % 8),
            np.asarray(found.ages_ms, dtype="<i8").tobytes(),
            np.asarray(found.vectors, dtype="<f4").reshape(n, dim).tobytes(),
        )
    )


class Decoded(NamedTuple):
    """A decoded binary answer (Python clients, tests and the benchmark)."""

    lookup: Lookup
    read_failed: bool


def decode_binary(data: bytes) -> Decoded:
    """Inverse of :func:`encode_binary`; ``ValueError`` on a malformed or truncated body."""
    if len(data) < HEADER.size:
        raise ValueError(f"binary answer of {len(data)} bytes is shorter than its header")
    magic, version, flags, n, dim = HEADER.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} feature answer: {magic!r} v{version}")
    ages_at = HEADER.size + n + (-n) % 8
    vectors_at = ages_at + 8 * n
    if len(data) != vectors_at + 4 * n * dim:
        raise ValueError(f"binary answer of {len(data)} bytes does not hold n={n}, dim={dim}")
    tiers = np.frombuffer(data, "<u1", n, HEADER.size)
    ages = np.frombuffer(data, "<i8", n, ages_at).astype(np.int64)
    vectors = np.frombuffer(data, "<f4", n * dim, vectors_at).astype(np.float32).reshape(n, dim)
    return Decoded(Lookup(vectors, tiers.astype(np.uint8), ages), bool(flags & FLAG_READ_FAILED))
