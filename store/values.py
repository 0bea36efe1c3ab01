"""Compact binary encoding of stored values (not Avro: the read path decodes hundreds per call).

Vector value (pairs and aggregates), little-endian::

    <B format> <B dtype> <H dim> <q event_time_ms> <I version_tag> [<I count>] <dim x dtype> <I crc>

``format`` = ``VALUE_VERSION << 4 | kind`` with kind 1 = pair, 2 = aggregate (adds ``count``),
3 = neighbours; dtype 0 = float16, 1 = float32. ``version_tag`` = CRC32 of the model version
string, so readers can reject embeddings of another FM without storing the string in every
value. ``crc`` = CRC32 of every byte before it, so a reader checks a whole value with one
``zlib.crc32(value) == CRC_RESIDUE`` (the CRC-32 of data followed by its own little-endian CRC
is this constant), without slicing. Neighbour value::

    <B format> <H n> <q event_time_ms> <n x q user ids> <n x f weights> <I crc>

Encoders do not validate (records are validated where they enter, at the Kafka codec); the
decoders are the last guard: a value that fails the checksum, carries an event time outside
:data:`schemas.limits` bounds, a non-finite vector or weight, or an older format version raises
:class:`~store.errors.CorruptValue` and is never served.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from schemas.vectors import VectorDtype, to_bytes
from store.errors import CorruptValue

#: Bumped on any layout change: values of another version are corrupt, never misread.
#: Version 1 (format bytes 1-3) had no checksum.
VALUE_VERSION = 2
FORMAT_PAIR = VALUE_VERSION << 4 | 1
FORMAT_AGGREGATE = VALUE_VERSION << 4 | 2
FORMAT_NEIGHBOURS = VALUE_VERSION << 4 | 3
#: zlib.crc32(data + crc32(data) as <I): the same for every ``data``
CRC_RESIDUE = 0x2144DF1C
_HEAD = struct.Struct("<BBHqI")
_COUNT = struct.Struct("<I")
_CRC = struct.Struct("<I")
_NB_HEAD = struct.Struct("<BHq")
#: bytes of a vector value around its vector (header + checksum)
PAIR_OVERHEAD = _HEAD.size + _CRC.size
_DTYPES: dict[int, np.dtype] = {0: np.dtype("<f2"), 1: np.dtype("<f4")}
_DTYPE_CODE = {VectorDtype.FLOAT16.value: 0, VectorDtype.FLOAT32.value: 1}


@functools.lru_cache(maxsize=64)
def version_tag(model_version: str) -> int:
    """Stable 32-bit tag of a model version string (cached: computed once per version)."""
    return zlib.crc32(model_version.encode())


def event_time_ok(t: int) -> bool:
    """Event times outside the schemas' bounds are corrupt (also guards ``t - value`` overflow)."""
    return MIN_EVENT_TIME_MS <= t < MAX_EVENT_TIME_MS


@dataclass(frozen=True, slots=True)
class StoredVector:
    """A decoded pair or aggregate value; ``data`` holds the raw vector bytes."""

    event_time_ms: int
    version_tag: int
    count: int
    dtype: np.dtype
    dim: int
    data: bytes = field(repr=False)

    def array(self) -> np.ndarray:
        """The vector as float32 ``[dim]``."""
        return np.frombuffer(self.data, dtype=self.dtype).astype(np.float32)


@dataclass(frozen=True, slots=True)
class StoredNeighbours:
    """A decoded neighbour list: user ids and cosine weights, best first."""

    event_time_ms: int
    user_ids: np.ndarray
    weights: np.ndarray


def _seal(body: bytes) -> bytes:
    return body + _CRC.pack(zlib.crc32(body))


def encode_pair(rec: PairEmbedding) -> bytes:
    body = (
        _HEAD.pack(
            FORMAT_PAIR,
            _DTYPE_CODE[rec.dtype],
            rec.dim,
            rec.event_time_ms,
            version_tag(rec.model_version),
        )
        + rec.vector
    )
    return body + _CRC.pack(zlib.crc32(body))  # _seal inlined: one call less per pair


def encode_pairs(recs: Sequence[PairEmbedding]) -> list[bytes]:
    """``[encode_pair(r) for r in recs]`` with the per-batch parts (format, dtype code, version
    tag) looked up once per run of equal ones: the FM writes whole batches of one model."""
    out: list[bytes] = []
    pack, crc, seal = _HEAD.pack, zlib.crc32, _CRC.pack
    last: tuple[str, str] | None = None
    code = tag = 0
    for r in recs:
        if (r.dtype, r.model_version) != last:
            last = (r.dtype, r.model_version)
            code, tag = _DTYPE_CODE[r.dtype], version_tag(r.model_version)
        body = pack(FORMAT_PAIR, code, r.dim, r.event_time_ms, tag) + r.vector
        out.append(body + seal(crc(body)))
    return out


def encode_state(
    event_time_ms: int, model_version: str, state: np.ndarray, dtype: VectorDtype
) -> bytes:
    """A user's FM state (the state tier) in the pair value layout: the same header, so the
    conditional write (event time, version tag) and the reader's checks apply unchanged; it
    is told apart by its key and its width, not its format."""
    vector = to_bytes(np.asarray(state, np.float32), dtype)
    head = _HEAD.pack(
        FORMAT_PAIR,
        _DTYPE_CODE[dtype.value],
        int(state.shape[-1]),
        int(event_time_ms),
        version_tag(model_version),
    )
    return _seal(head + vector)


def pair_value_length(raw: bytes) -> int | None:
    """Bytes of the pair-layout value (a pair or a state) that ``raw`` starts with, from its
    header; None when ``raw`` does not start with one."""
    if len(raw) < _HEAD.size:
        return None
    fmt, dtype_code, dim, _, _ = _HEAD.unpack_from(raw)
    dtype = _DTYPES.get(dtype_code)
    if fmt != FORMAT_PAIR or dtype is None:
        return None
    return PAIR_OVERHEAD + int(dim) * int(dtype.itemsize)


def encode_aggregate(rec: UserAggregate) -> bytes:
    head = _HEAD.pack(
        FORMAT_AGGREGATE,
        _DTYPE_CODE[rec.dtype],
        rec.dim,
        rec.event_time_ms,
        version_tag(rec.model_version),
    )
    return _seal(head + _COUNT.pack(rec.count) + rec.vector)


def encode_neighbours(rec: NeighbourList) -> bytes:
    ids = np.asarray(rec.neighbours, dtype="<i8").tobytes()
    weights = np.asarray(rec.weights, dtype="<f4").tobytes()
    head = _NB_HEAD.pack(FORMAT_NEIGHBOURS, len(rec.neighbours), rec.event_time_ms)
    return _seal(head + ids + weights)


def _check_sealed(raw: bytes, what: str) -> None:
    if len(raw) < _CRC.size or zlib.crc32(raw) != CRC_RESIDUE:
        raise CorruptValue(f"{what} value of {len(raw)} bytes fails its checksum")


def decode_vector(raw: bytes) -> StoredVector:
    """Decode a pair or aggregate value; raises :class:`CorruptValue`, never anything else."""
    _check_sealed(raw, "vector")
    try:
        fmt, dtype_code, dim, event_time_ms, tag = _HEAD.unpack_from(raw)
        offset = _HEAD.size
        count = 1
        if fmt == FORMAT_AGGREGATE:
            (count,) = _COUNT.unpack_from(raw, offset)
            offset += _COUNT.size
        elif fmt != FORMAT_PAIR:
            raise CorruptValue(f"format byte {fmt:#x} is not a version-{VALUE_VERSION} vector")
        dtype: np.dtype = _DTYPES[dtype_code]
    except (struct.error, KeyError) as exc:
        raise CorruptValue(f"cannot decode vector value of {len(raw)} bytes: {exc}") from exc
    data = raw[offset : -_CRC.size]
    if dim == 0 or len(data) != dim * dtype.itemsize:
        raise CorruptValue(f"vector value has {len(data)} bytes, expected {dim * dtype.itemsize}")
    if not event_time_ok(event_time_ms):
        raise CorruptValue(f"vector value has event time {event_time_ms} out of bounds")
    if count == 0:
        raise CorruptValue("aggregate value has count 0")
    if not np.isfinite(np.frombuffer(data, dtype=dtype)).all():
        raise CorruptValue("vector value contains NaN or infinity")
    return StoredVector(event_time_ms, tag, count, dtype, dim, data)


def decode_neighbours(raw: bytes) -> StoredNeighbours:
    """Decode a neighbour-list value; raises :class:`CorruptValue`, never anything else."""
    _check_sealed(raw, "neighbour")
    try:
        fmt, n, event_time_ms = _NB_HEAD.unpack_from(raw)
    except struct.error as exc:
        raise CorruptValue(f"cannot decode neighbour value: {exc}") from exc
    if fmt != FORMAT_NEIGHBOURS or len(raw) != _NB_HEAD.size + 12 * n + _CRC.size:
        raise CorruptValue(f"bad neighbour value (format {fmt:#x}, n {n}, {len(raw)} bytes)")
    if not event_time_ok(event_time_ms):
        raise CorruptValue(f"neighbour value has event time {event_time_ms} out of bounds")
    ids = np.frombuffer(raw, dtype="<i8", count=n, offset=_NB_HEAD.size)
    weights = np.frombuffer(raw, dtype="<f4", count=n, offset=_NB_HEAD.size + 8 * n)
    if not np.isfinite(weights).all() or (ids < 0).any():
        raise CorruptValue("neighbour value has a non-finite weight or a negative user id")
    return StoredNeighbours(event_time_ms, ids, weights)
