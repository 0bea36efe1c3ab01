"""Vectorised decoding of many stored vector values at once (the reader's hot path).

Values of the common layout (pair, float16, same dim) are joined and viewed through one numpy
structured dtype: one ``frombuffer`` instead of one Python decode per key. Anything else falls
back to :func:`store.values.decode_vector` per value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from store.errors import CorruptValue
from store.values import FORMAT_PAIR, decode_vector


@dataclass(frozen=True, slots=True)
class DecodedVectors:
    """Decoded values aligned with the input; rows of absent/corrupt values are all zero."""

    present: np.ndarray  #: bool [n]
    event_time_ms: np.ndarray  #: int64 [n]
    version_tag: np.ndarray  #: uint32 [n]
    vectors: np.ndarray  #: float32 [n, dim]
    corrupt: int  #: values that failed to decode (counted, treated as absent)


def _pair_dtype(dim: int) -> np.dtype:
    return np.dtype(
        [
            ("fmt", "u1"),
            ("dt", "u1"),
            ("dim", "<u2"),
            ("t", "<i8"),
            ("tag", "<u4"),
            ("vec", "<f2", (dim,)),
        ]
    )


def decode_many(values: Sequence[bytes | None], dim: int) -> DecodedVectors:
    """Decode ``values`` (raw store values or ``None``) into aligned arrays of width ``dim``."""
    n = len(values)
    present = np.zeros(n, dtype=bool)
    times = np.zeros(n, dtype=np.int64)
    tags = np.zeros(n, dtype=np.uint32)
    vectors = np.zeros((n, dim), dtype=np.float32)
    corrupt = 0
    fast_len = 16 + 2 * dim
    fast_idx = [
        i
        for i, v in enumerate(values)
        if v is not None and len(v) == fast_len and v[0] == FORMAT_PAIR and v[1] == 0
    ]
    if fast_idx:
        rows = np.frombuffer(b"".join(values[i] for i in fast_idx), dtype=_pair_dtype(dim))  # type: ignore[misc]
        ok = rows["dim"] == dim
        idx = np.asarray(fast_idx)[ok]
        present[idx] = True
        times[idx] = rows["t"][ok]
        tags[idx] = rows["tag"][ok]
        vectors[idx] = rows["vec"][ok]
        corrupt += int((~ok).sum())
    fast = set(fast_idx)
    for i, raw in enumerate(values):
        if raw is None or i in fast:
            continue
        try:
            got = decode_vector(raw)
        except CorruptValue:
            corrupt += 1
            continue
        if got.dim != dim:
            corrupt += 1
            continue
        present[i] = True
        times[i] = got.event_time_ms
        tags[i] = got.version_tag
        vectors[i] = got.array()
    return DecodedVectors(present, times, tags, vectors, corrupt)
