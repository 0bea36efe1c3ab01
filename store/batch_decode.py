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
from typing import Any, cast

import numpy as np

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from store.errors import CorruptValue
from store.values import (
    CRC_RESIDUE,
    FORMAT_AGGREGATE,
    FORMAT_PAIR,
    PAIR_OVERHEAD,
    decode_vector,
)


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
#: value length minus 2 x dim -> the float16 layout decoded in bulk (an aggregate adds a count)
_FAST_FORMATS = {PAIR_OVERHEAD: FORMAT_PAIR, PAIR_OVERHEAD + 4: FORMAT_AGGREGATE}


@lru_cache(maxsize=16)
def _layout(dim: int, fmt: int) -> np.dtype:
    """The float16 pair (or, with ``count``, aggregate) value of ``dim`` as one record."""
    fields: list[tuple[Any, ...]] = [
        ("fmt", "u1"),
        ("dt", "u1"),
        ("dim", "<u2"),
        ("t", "<i8"),
        ("tag", "<u4"),
    ]
    if fmt == FORMAT_AGGREGATE:
        fields.append(("count", "<u4"))
    fields.append(("vec", "<u2", (dim,)))  # float16 bit patterns, converted through the table
    fields.append(("crc", "<u4"))
    return np.dtype(fields)


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
    sizes = set(map(len, raw))
    if crcs.count(CRC_RESIDUE) == len(raw) and len(sizes) == 1:  # the common case
        fmt = _FAST_FORMATS.get(sizes.pop() - 2 * dim)
        if fmt is not None:
            rows, other = _decode_fast(raw, index, dim, fmt)
            return _merge_all([rows, _decode_slow(values, other, dim)]) if len(other) else rows
    sealed = np.array(crcs, dtype=np.uint32) == CRC_RESIDUE
    lengths = np.fromiter(map(len, raw), dtype=np.intp, count=len(raw))
    corrupt = len(raw) - int(sealed.sum())
    parts: list[DecodedRows] = []
    slow = sealed
    for overhead, fmt in _FAST_FORMATS.items():
        fast = sealed & (lengths == overhead + 2 * dim)
        if fast.any():
            rows, other = _decode_fast(list(compress(raw, fast.tolist())), index[fast], dim, fmt)
            parts.append(rows)
            slow = slow & ~fast
            slow[np.searchsorted(index, other)] = True  # another layout of that length
    parts.append(_decode_slow(values, index[slow], dim))
    return _merge_all(parts, corrupt)


def _empty_rows(dim: int, corrupt: int) -> DecodedRows:
    return DecodedRows(
        np.zeros(0, np.intp),
        np.zeros(0, np.int64),
        np.zeros(0, np.uint32),
        np.zeros((0, dim), np.float32),
        corrupt,
    )


def _decode_fast(
    raw: list[bytes], index: np.ndarray, dim: int, fmt: int
) -> tuple[DecodedRows, np.ndarray]:
    """Decode sealed values of the length of ``fmt`` values (float16, ``dim``): their valid
    rows (with the number of corrupt ones) and the indices of values of another layout of that
    length, for the slow path."""
    rows = np.frombuffer(b"".join(raw), dtype=_layout(dim, fmt))
    times, halves = rows["t"], rows["vec"]
    common = (rows["fmt"] == fmt) & (rows["dt"] == 0)
    ok = (
        common
        & (rows["dim"] == dim)
        & (times >= MIN_EVENT_TIME_MS)
        & (times < MAX_EVENT_TIME_MS)
        & ~((halves & _HALF_EXP) == _HALF_EXP).any(axis=1)  # no infinity or NaN
    )
    if fmt == FORMAT_AGGREGATE:
        ok &= rows["count"] != 0
    vecs = np.take(_HALF_TO_FLOAT, halves)
    if ok.all():
        return DecodedRows(index, times, rows["tag"], vecs, 0), index[:0]
    bad = int((common & ~ok).sum())
    return DecodedRows(index[ok], times[ok], rows["tag"][ok], vecs[ok], bad), index[~common]


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


def _merge_all(parts: list[DecodedRows], corrupt: int = 0) -> DecodedRows:
    """All row sets in ascending input order; ``corrupt`` plus every set's count."""
    index = np.concatenate([p.index for p in parts])
    order = np.argsort(index, kind="stable")
    return DecodedRows(
        index[order],
        np.concatenate([p.event_time_ms for p in parts])[order],
        np.concatenate([p.version_tag for p in parts])[order],
        np.concatenate([p.vectors for p in parts])[order],
        corrupt + sum(p.corrupt for p in parts),
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
