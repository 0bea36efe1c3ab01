"""A worker's KNN index as a store snapshot, so the ranker can serve cold-start neighbours.

Binary layout: ``<4s magic "KNN1"> <I n> <q event_time_ms> <I dim> <n x int64 user ids>
<n x dim float16 vectors>``. The ranker merges the snapshots of all workers (newest wins per
user) into one in-process :class:`~streams.engine.neighbours.NeighbourIndex`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from store.errors import CorruptValue
from store.protocol import FeatureStore
from streams.engine.neighbours import NeighbourConfig, NeighbourIndex, UserRepresentations

_HEAD = struct.Struct("<4sIqI")
MAGIC = b"KNN1"


@dataclass(frozen=True, slots=True)
class Snapshot:
    event_time_ms: int
    user_ids: np.ndarray  #: int64 [n]
    vectors: np.ndarray  #: float32 [n, dim]


def encode_snapshot(index: NeighbourIndex, event_time_ms: int) -> bytes:
    vectors = index.vectors.astype("<f2")
    dim = vectors.shape[1] if vectors.ndim == 2 else 0
    head = _HEAD.pack(MAGIC, len(index.user_ids), event_time_ms, dim)
    return head + index.user_ids.astype("<i8").tobytes() + vectors.tobytes()


def decode_snapshot(raw: bytes) -> Snapshot:
    try:
        magic, n, t, dim = _HEAD.unpack_from(raw)
    except struct.error as exc:
        raise CorruptValue(f"snapshot too short: {exc}") from exc
    if magic != MAGIC or len(raw) != _HEAD.size + 8 * n + 2 * n * dim:
        raise CorruptValue("not a KNN snapshot or truncated")
    ids = np.frombuffer(raw, "<i8", n, _HEAD.size)
    vecs = np.frombuffer(raw, "<f2", n * dim, _HEAD.size + 8 * n).astype(np.float32).reshape(n, dim)
    return Snapshot(t, ids, vecs)


def publish_snapshot(
    store: FeatureStore, name: str, index: NeighbourIndex, event_time_ms: int, ttl_ms: int
) -> None:
    store.write_snapshot(name, encode_snapshot(index, event_time_ms), ttl_ms)


def merged_index(
    snapshots: list[Snapshot],
    reps: UserRepresentations,
    config: NeighbourConfig,
    before_ms: int | None = None,
) -> tuple[NeighbourIndex, int]:
    """One index over all snapshots taken before ``before_ms`` (newest wins per user).

    Returns the index and the newest snapshot event time used (0 if none).
    """
    best: dict[int, tuple[int, np.ndarray]] = {}
    newest = 0
    for snap in snapshots:
        if before_ms is not None and snap.event_time_ms >= before_ms:
            continue
        newest = max(newest, snap.event_time_ms)
        for uid, vec in zip(snap.user_ids.tolist(), snap.vectors, strict=True):
            if uid not in best or best[uid][0] < snap.event_time_ms:
                best[uid] = (snap.event_time_ms, vec)
    users = sorted(best)
    vectors = (
        np.stack([best[u][1] for u in users])
        if users
        else np.zeros((0, reps.items.dim), np.float32)
    )
    return NeighbourIndex(users, vectors, reps, config), newest
