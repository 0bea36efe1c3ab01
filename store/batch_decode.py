"""Vectorised decoding of many stored vector values at once (the reader's hot path).

Values of the common layout (pair, float16, same dim) are joined and viewed through one numpy
structured dtype: one ``frombuffer`` instead of one Python decode per key. Anything else falls
back to :func:`store.values.decode_vector` per value. Both paths apply the same checks
(checksum, format version, dim, event-time bounds, finite vector): a value either decodes to
what :func:`~store.values.decode_vector` returns or is counted corrupt and left absent.

Per value, only C-level passes run (``map`` of ``is not None``, ``crc32``, ``len``, one
``join``); everything else is a handful of numpy operations on the whole batch, so their fixed
costs (a few microseconds each) matter as much as the per-value ones: the common case (every
value sealed, of the common length and valid) takes the fewest.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress, repeat
from operator import is_not
from typing import cast

import numpy as np

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from store.errors import CorruptValue
from store.values import CRC_RESIDUE, FORMAT_PAIR, PAIR_OVERHEAD, decode_vector


@dataclass(frozen=True, slots=True)
class DecodedVectors:
    """Decoded values aligned with the input; rows of absent/corrupt values are all zero."""

    present: np.ndarray  #: bool [n]
    event_time_ms: np.ndarray  #: int64 [n]
    version_tag: np.ndarray  #: uint32 [n]
    vectors: np.ndarray  #: float32 [n, dim]
    corrupt: int  #: values that failed to decode or a check (counted, treated as absent)


@dataclass(frozen=True, slots=True)
class DecodedRows:
    """The valid values only, compacted: row ``r`` decodes input value ``index[r]``.

    What the reader's exact tier needs: it copies the fresh rows straight into its output,
    without a zero-filled ``[n, dim]`` intermediate aligned with the input.
    """

    index: np.ndarray  #: intp [m], ascending
    event_time_ms: np.ndarray  #: int64 [m] (may be a read-only view of the joined values)
    version_tag: np.ndarray  #: uint32 [m] (likewise)
    vectors: np.ndarray  #: float32 [m, dim]
    corrupt: int  #: values that failed to decode or a check (counted, not in the rows)


#: float16 bit pattern -> float32 (256 KiB, exact for every pattern incl. NaN/inf/subnormals).
#: A table lookup is ~2x faster than numpy's float16 cast here, the biggest cost of a decode.
_HALF_TO_FLOAT = (
    np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view("<f2").astype(np.float32)
)
#: float16 exponent bits; all set = infinity or NaN
_HALF_EXP = np.uint16(0x7C00)


@lru_cache(maxsize=8)
def _pair_dtype(dim: int) -> np.dtype:
    return np.dtype(
        [
            ("fmt", "u1"),
            ("dt", "u1"),
            ("dim", "<u2"),
            ("t", "<i8"),
            ("tag", "<u4"),
            ("vec", "<u2", (dim,)),  # float16 bit patterns, converted through the table
            ("crc", "<u4"),
        ]
    )


def _fast_len(dim: int) -> int:
    return PAIR_OVERHEAD + 2 * dim


def decode_rows(values: Sequence[bytes | None], dim: int) -> DecodedRows:
    """Decode the valid values among ``values`` (raw store values or ``None``); never raises on
    value content. Absent values are skipped; corrupt ones are counted and skipped."""
    n = len(values)
    mask = list(map(is_not, values, repeat(None)))
    if mask.count(True) == n:
        raw, index = cast(list[bytes], list(values)), np.arange(n, dtype=np.intp)
    else:
        raw = cast(list[bytes], list(compress(values, mask)))
        index = np.fromiter(compress(range(n), mask), dtype=np.intp, count=len(raw))
    if not raw:
        return _empty_rows(dim, 0)
    crcs = list(map(zlib.crc32, raw))
    if crcs.count(CRC_RESIDUE) == len(raw) and set(map(len, raw)) == {_fast_len(dim)}:
        rows, other, bad = _decode_fast(raw, index, dim)  # the common case: all sealed, one size
        if not len(other):
            return DecodedRows(rows.index, rows.event_time_ms, rows.version_tag, rows.vectors, bad)
        return _merge(rows, _decode_slow(values, other, dim), bad)
    sealed = np.array(crcs, dtype=np.uint32) == CRC_RESIDUE
    fast = sealed & (np.fromiter(map(len, raw), dtype=np.intp, count=len(raw)) == _fast_len(dim))
    corrupt = len(raw) - int(sealed.sum())
    rows, other, bad = _decode_fast(list(compress(raw, fast.tolist())), index[fast], dim)
    slow_idx = np.sort(np.concatenate([index[sealed & ~fast], other]))
    return _merge(rows, _decode_slow(values, slow_idx, dim), corrupt + bad)


def _empty_rows(dim: int, corrupt: int) -> DecodedRows:
    return DecodedRows(
        np.zeros(0, np.intp),
        np.zeros(0, np.int64),
        np.zeros(0, np.uint32),
        np.zeros((0, dim), np.float32),
        corrupt,
    )


def _decode_fast(
    raw: list[bytes], index: np.ndarray, dim: int
) -> tuple[DecodedRows, np.ndarray, int]:
    """Decode sealed values of the common length: their valid rows, the indices of values of
    another layout of that length (for the slow path) and the number of corrupt ones."""
    if not raw:
        return _empty_rows(dim, 0), np.zeros(0, np.intp), 0
    rows = np.frombuffer(b"".join(raw), dtype=_pair_dtype(dim))
    times, halves = rows["t"], rows["vec"]
    common = (rows["fmt"] == FORMAT_PAIR) & (rows["dt"] == 0)
    ok = (
        common
        & (rows["dim"] == dim)
        & (times >= MIN_EVENT_TIME_MS)
        & (times < MAX_EVENT_TIME_MS)
        & ~((halves & _HALF_EXP) == _HALF_EXP).any(axis=1)  # no infinity or NaN
    )
    vecs = np.take(_HALF_TO_FLOAT, halves)
    if ok.all():
        return DecodedRows(index, times, rows["tag"], vecs, 0), index[:0], 0
    bad = int((common & ~ok).sum())
    out = DecodedRows(index[ok], times[ok], rows["tag"][ok], vecs[ok], 0)
    return out, index[~common], bad  # another layout of the same length (e.g. an aggregate)


def _decode_slow(values: Sequence[bytes | None], idx: np.ndarray, dim: int) -> DecodedRows:
    """Per-value decode of the rare values of another layout (float32, aggregates, ...)."""
    keep: list[int] = []
    times: list[int] = []
    tags: list[int] = []
    vecs: list[np.ndarray] = []
    corrupt = 0
    for i in idx.tolist():
        try:
            decoded = decode_vector(cast(bytes, values[i]))
        except CorruptValue:
            corrupt += 1
            continue
        if decoded.dim != dim:
            corrupt += 1
            continue
        keep.append(i)
        times.append(decoded.event_time_ms)
        tags.append(decoded.version_tag)
        vecs.append(decoded.array())
    if not keep:
        return _empty_rows(dim, corrupt)
    return DecodedRows(
        np.array(keep, np.intp),
        np.array(times, np.int64),
        np.array(tags, np.uint32),
        np.stack(vecs),
        corrupt,
    )


def _merge(a: DecodedRows, b: DecodedRows, corrupt: int) -> DecodedRows:
    """Both row sets in ascending input order; ``corrupt`` plus both sets' counts."""
    index = np.concatenate([a.index, b.index])
    order = np.argsort(index, kind="stable")
    return DecodedRows(
        index[order],
        np.concatenate([a.event_time_ms, b.event_time_ms])[order],
        np.concatenate([a.version_tag, b.version_tag])[order],
        np.concatenate([a.vectors, b.vectors])[order],
        corrupt + a.corrupt + b.corrupt,
    )


def decode_many(values: Sequence[bytes | None], dim: int) -> DecodedVectors:
    """Decode ``values`` (raw store values or ``None``) into arrays aligned with the input, of
    width ``dim`` (see :func:`decode_rows`). Never raises on value content."""
    n = len(values)
    rows = decode_rows(values, dim)
    present = np.zeros(n, dtype=bool)
    present[rows.index] = True
    times = np.zeros(n, dtype=np.int64)
    times[rows.index] = rows.event_time_ms
    tags = np.zeros(n, dtype=np.uint32)
    tags[rows.index] = rows.version_tag
    if len(rows.index) == n:
        vectors = rows.vectors
    else:
        vectors = np.zeros((n, dim), dtype=np.float32)
        vectors[rows.index] = rows.vectors
    return DecodedVectors(present, times, tags, vectors, rows.corrupt)
