"""The stored form of a user's recent impressions: what a fair VM's streaming features need.

Issue 22: a VM a team would ship reads the user's recent interactions (counts, recency, recent
positive rate, the last engaged items) at request time. The pipeline already keeps that history
for the FM (the ``history`` agent's table); the agent also writes it to the store under the
user's hash tag, so the ranker fetches it in the same round trip as the user's embeddings.

Value, little-endian (same checksum convention as :mod:`store.values`)::

    <B format> <H n> <n x q item ids> <n x b labels> <n x q event times ms> <I crc>

Entries are oldest first. The decoder is the last guard: a bad checksum, another format, labels
outside {0, 1}, negative item ids, event times out of bounds or not non-decreasing raise
:class:`~store.errors.CorruptValue`, and such a value is never served.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from store.errors import CorruptValue
from store.values import CRC_RESIDUE, VALUE_VERSION

FORMAT_HISTORY = VALUE_VERSION << 4 | 4
_HEAD = struct.Struct("<BH")
_CRC = struct.Struct("<I")
#: entries one value can hold (the ``H`` count); the history agent keeps ``2 * history_len``
MAX_ENTRIES = 0xFFFF


@dataclass(frozen=True, slots=True)
class StoredHistory:
    """A decoded history, oldest first: ``items`` int64, ``labels`` int8, ``times_ms`` int64."""

    items: np.ndarray
    labels: np.ndarray
    times_ms: np.ndarray

    @classmethod
    def empty(cls) -> StoredHistory:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return int(self.items.shape[0])


def encode_history(entries: Sequence[Sequence[int]]) -> bytes:
    """``entries`` = ``(item_id, label, event_time_ms)`` oldest first (the history table's
    lists); at most :data:`MAX_ENTRIES`."""
    n = len(entries)
    if n > MAX_ENTRIES:
        raise ValueError(f"a stored history holds at most {MAX_ENTRIES} entries, got {n}")
    arr = np.asarray(entries, dtype=np.int64).reshape(n, 3)
    body = b"".join(
        (
            _HEAD.pack(FORMAT_HISTORY, n),
            arr[:, 0].astype("<i8").tobytes(),
            arr[:, 1].astype("i1").tobytes(),
            arr[:, 2].astype("<i8").tobytes(),
        )
    )
    return body + _CRC.pack(zlib.crc32(body))


def decode_history(raw: bytes) -> StoredHistory:
    """Decode a history value; raises :class:`CorruptValue`, never anything else."""
    if len(raw) < _HEAD.size + _CRC.size or zlib.crc32(raw) != CRC_RESIDUE:
        raise CorruptValue(f"history value of {len(raw)} bytes fails its checksum")
    fmt, n = _HEAD.unpack_from(raw)
    if fmt != FORMAT_HISTORY or len(raw) != _HEAD.size + 17 * n + _CRC.size:
        raise CorruptValue(f"bad history value (format {fmt:#x}, n {n}, {len(raw)} bytes)")
    offset = _HEAD.size
    items = np.frombuffer(raw, "<i8", n, offset).astype(np.int64)
    labels = np.frombuffer(raw, "i1", n, offset + 8 * n).astype(np.int8)
    times = np.frombuffer(raw, "<i8", n, offset + 9 * n).astype(np.int64)
    if n and (
        (items < 0).any()
        or ((labels != 0) & (labels != 1)).any()
        or times[0] < MIN_EVENT_TIME_MS
        or times[-1] >= MAX_EVENT_TIME_MS
        or (np.diff(times) < 0).any()
    ):
        raise CorruptValue("history value has a bad item id, label or event-time order")
    return StoredHistory(items, labels, times)
