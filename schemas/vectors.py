"""Vector <-> bytes conversion with explicit dtype and dimension checks."""

from __future__ import annotations

from enum import StrEnum

import numpy as np


class VectorDtype(StrEnum):
    """Wire dtype of a vector; matches the Avro enum ``VectorDtype``."""

    FLOAT16 = "FLOAT16"
    FLOAT32 = "FLOAT32"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype("<f2") if self is VectorDtype.FLOAT16 else np.dtype("<f4")


class VectorSizeError(ValueError):
    """Byte length does not match ``dim`` x dtype size."""


def to_bytes(vector: np.ndarray, dtype: VectorDtype = VectorDtype.FLOAT16) -> bytes:
    """Encode a 1-d vector as little-endian bytes of ``dtype``."""
    return np.ascontiguousarray(vector, dtype=dtype.numpy).reshape(-1).tobytes()


def from_bytes(data: bytes, dtype: VectorDtype, dim: int) -> np.ndarray:
    """Decode bytes into a float32 array of shape ``[dim]``; raises if the size is wrong."""
    expected = dim * dtype.numpy.itemsize
    if len(data) != expected:
        raise VectorSizeError(f"vector has {len(data)} bytes, expected {expected} (dim={dim})")
    return np.frombuffer(data, dtype=dtype.numpy).astype(np.float32)
