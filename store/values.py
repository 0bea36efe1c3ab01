"""Compact binary encoding of stored values (not Avro: the read path decodes hundreds per call).

Vector value (pairs and aggregates)::

    <B format> <B dtype> <H dim> <q event_time_ms> <I version_tag> [<I count>] <dim x dtype>

``format`` 1 = pair, 2 = aggregate (adds ``count``); dtype 0 = float16, 1 = float32.
``version_tag`` = CRC32 of the model version string, so readers can reject embeddings of
another FM without storing the string in every value. Neighbour value::

    <B format=3> <H n> <q event_time_ms> <n x q user ids> <n x f weights>
"""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from schemas.vectors import VectorDtype
from store.errors import CorruptValue

FORMAT_PAIR = 1
FORMAT_AGGREGATE = 2
FORMAT_NEIGHBOURS = 3
_HEAD = struct.Struct("<BBHqI")
_COUNT = struct.Struct("<I")
_NB_HEAD = struct.Struct("<BHq")
_DTYPES: dict[int, np.dtype] = {0: np.dtype("<f2"), 1: np.dtype("<f4")}
_DTYPE_CODE = {VectorDtype.FLOAT16.value: 0, VectorDtype.FLOAT32.value: 1}


@functools.lru_cache(maxsize=64)
def version_tag(model_version: str) -> int:
    """Stable 32-bit tag of a model version string (cached: computed once per version)."""
    return zlib.crc32(model_version.encode())


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


def encode_pair(rec: PairEmbedding) -> bytes:
    head = _HEAD.pack(
        FORMAT_PAIR,
        _DTYPE_CODE[rec.dtype],
        rec.dim,
        rec.event_time_ms,
        version_tag(rec.model_version),
    )
    return head + rec.vector


def encode_aggregate(rec: UserAggregate) -> bytes:
    head = _HEAD.pack(
        FORMAT_AGGREGATE,
        _DTYPE_CODE[rec.dtype],
        rec.dim,
        rec.event_time_ms,
        version_tag(rec.model_version),
    )
    return head + _COUNT.pack(rec.count) + rec.vector


def encode_neighbours(rec: NeighbourList) -> bytes:
    ids = np.asarray(rec.neighbours, dtype="<i8").tobytes()
    weights = np.asarray(rec.weights, dtype="<f4").tobytes()
    return _NB_HEAD.pack(FORMAT_NEIGHBOURS, len(rec.neighbours), rec.event_time_ms) + ids + weights


def decode_vector(raw: bytes) -> StoredVector:
    """Decode a pair or aggregate value; raises :class:`CorruptValue`."""
    try:
        fmt, dtype_code, dim, event_time_ms, tag = _HEAD.unpack_from(raw)
        offset = _HEAD.size
        count = 1
        if fmt == FORMAT_AGGREGATE:
            (count,) = _COUNT.unpack_from(raw, offset)
            offset += _COUNT.size
        elif fmt != FORMAT_PAIR:
            raise CorruptValue(f"format byte {fmt} is not a vector value")
        dtype: np.dtype = _DTYPES[dtype_code]
    except (struct.error, KeyError) as exc:
        raise CorruptValue(f"cannot decode vector value of {len(raw)} bytes: {exc}") from exc
    data = raw[offset:]
    if len(data) != dim * dtype.itemsize:
        raise CorruptValue(f"vector value has {len(data)} bytes, expected {dim * dtype.itemsize}")
    return StoredVector(event_time_ms, tag, count, dtype, dim, data)


def decode_neighbours(raw: bytes) -> StoredNeighbours:
    """Decode a neighbour-list value; raises :class:`CorruptValue`."""
    try:
        fmt, n, event_time_ms = _NB_HEAD.unpack_from(raw)
    except struct.error as exc:
        raise CorruptValue(f"cannot decode neighbour value: {exc}") from exc
    if fmt != FORMAT_NEIGHBOURS or len(raw) != _NB_HEAD.size + 12 * n:
        raise CorruptValue(f"bad neighbour value (format {fmt}, n {n}, {len(raw)} bytes)")
    ids = np.frombuffer(raw, dtype="<i8", count=n, offset=_NB_HEAD.size)
    weights = np.frombuffer(raw, dtype="<f4", count=n, offset=_NB_HEAD.size + 8 * n)
    return StoredNeighbours(event_time_ms, ids, weights)
