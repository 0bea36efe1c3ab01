"""A worker's KNN index as a store snapshot, so the ranker can serve cold-start neighbours.

Binary layout: ``<4s magic "KNN2"> <I n> <q event_time_ms> <I dim> <I version_tag>
<n x int64 user ids> <n x dim float16 vectors>``. ``version_tag`` is the CRC32 of the model
version of the bundle whose item vectors built the user representations
(:func:`store.values.version_tag`): vectors of another bundle live in another space (or another
dimension), so the ranker skips snapshots whose tag or dim differs from its own bundle's
(:func:`usable_snapshots`). Version-less ``KNN1`` snapshots no longer decode. The ranker merges
the usable snapshots of all workers (newest wins per user) into one in-process
:class:`~streams.engine.neighbours.NeighbourIndex`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from store.errors import CorruptValue
from store.protocol import FeatureStore
from streams.engine.neighbours import NeighbourConfig, NeighbourIndex, UserRepresentations

_HEAD = struct.Struct("<4sIqII")
MAGIC = b"KNN2"


@dataclass(frozen=True, slots=True)
class Snapshot:
    event_time_ms: int
    user_ids: np.ndarray  #: int64 [n]
    vectors: np.ndarray  #: float32 [n, dim]
    version_tag: int  #: CRC32 of the publishing bundle's model version
    dim: int


def encode_snapshot(index: NeighbourIndex, event_time_ms: int, version_tag: int) -> bytes:
    vectors = index.vectors.astype("<f2")
    dim = vectors.shape[1] if vectors.ndim == 2 else 0
    head = _HEAD.pack(MAGIC, len(index.user_ids), event_time_ms, dim, version_tag)
    return head + index.user_ids.astype("<i8").tobytes() + vectors.tobytes()


def decode_snapshot(raw: bytes) -> Snapshot:
    """Decode a snapshot; raises :class:`CorruptValue` on anything but a whole KNN2 value."""
    try:
        magic, n, t, dim, tag = _HEAD.unpack_from(raw)
    except struct.error as exc:
        raise CorruptValue(f"snapshot too short: {exc}") from exc
    if magic != MAGIC or len(raw) != _HEAD.size + 8 * n + 2 * n * dim:
        raise CorruptValue(f"not a {MAGIC.decode()} snapshot (magic {magic!r}) or truncated")
    ids = np.frombuffer(raw, "<i8", n, _HEAD.size)
    vecs = np.frombuffer(raw, "<f2", n * dim, _HEAD.size + 8 * n).astype(np.float32).reshape(n, dim)
    return Snapshot(t, ids, vecs, tag, dim)


def publish_snapshot(
    store: FeatureStore,
    name: str,
    index: NeighbourIndex,
    event_time_ms: int,
    ttl_ms: int,
    version_tag: int,
) -> None:
    store.write_snapshot(name, encode_snapshot(index, event_time_ms, version_tag), ttl_ms)


def usable_snapshots(
    snapshots: list[Snapshot], version_tag: int | None, dim: int
) -> tuple[list[Snapshot], int]:
    """The snapshots of this bundle (``version_tag``, None = any; vectors of ``dim``) and the
    number skipped as foreign. An empty snapshot of the right version is usable whatever its
    dim (an empty index has none)."""
    keep = [
        s
        for s in snapshots
        if (version_tag is None or s.version_tag == version_tag)
        and (s.dim == dim or len(s.user_ids) == 0)
    ]
    return keep, len(snapshots) - len(keep)


def merged_index(
    snapshots: list[Snapshot],
    reps: UserRepresentations,
    config: NeighbourConfig,
    before_ms: int | None = None,
    version_tag: int | None = None,
) -> tuple[NeighbourIndex, int]:
    """One index over this bundle's snapshots (see :func:`usable_snapshots`: foreign ones are
    skipped, never mixed in) taken before ``before_ms`` (newest wins per user).

    Returns the index and the newest snapshot event time used (0 if none).
    """
    best: dict[int, tuple[int, np.ndarray]] = {}
    newest = 0
    mine, _ = usable_snapshots(snapshots, version_tag, reps.items.dim)
    for snap in mine:
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
