"""Rolling per-user aggregate: mean of the user's pair embeddings over the last 24 h of event time.

State is bucketed (``bucket_ms``, default 1 h): per bucket the vector sum and count. A new
embedding lands in its bucket; buckets that end before ``newest - window`` are evicted by
*event time* (not Faust's wall-clock window expiry, which would purge replayed traffic). The
window is therefore exact to one bucket. State serialises to plain JSON for a Faust table.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas.records import PairEmbedding, UserAggregate
from schemas.vectors import VectorDtype


@dataclass(slots=True)
class AggregateState:
    """Bucketed sums of one user: ``bucket start -> (count, sum float64 [dim])``."""

    buckets: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)
    newest_ms: int = 0
    #: (item_id, event_time_ms) already counted, so redelivered embeddings are not counted twice
    seen: set[tuple[int, int]] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        """JSON-safe form for a Faust table; sums travel as base64 float64 bytes (exact, and far
        cheaper to encode and decode than lists of floats on every embedding)."""
        return {
            "b": {
                str(k): [c, base64.b64encode(s.astype("<f8").tobytes()).decode()]
                for k, (c, s) in self.buckets.items()
            },
            "n": self.newest_ms,
            "s": [list(x) for x in self.seen],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> AggregateState:
        if not data:
            return cls()
        return cls(
            {
                int(k): (int(c), np.frombuffer(base64.b64decode(s), "<f8").copy())
                for k, (c, s) in data["b"].items()
            },
            int(data["n"]),
            {(int(i), int(t)) for i, t in data["s"]},
        )


class RollingAggregator:
    """Adds pair embeddings to per-user state and emits the user's current aggregate."""

    def __init__(self, window_ms: int = 24 * 3_600_000, bucket_ms: int = 3_600_000) -> None:
        if window_ms % bucket_ms:
            raise ValueError("window_ms must be a multiple of bucket_ms")
        self.window_ms = window_ms
        self.bucket_ms = bucket_ms

    def add(
        self, state: AggregateState, embeddings: Iterable[PairEmbedding]
    ) -> UserAggregate | None:
        """Fold ``embeddings`` (all of one user) into ``state``; the new aggregate, or None."""
        last: PairEmbedding | None = None
        for emb in embeddings:
            key = (emb.item_id, emb.event_time_ms)
            if key in state.seen:
                continue
            state.seen.add(key)
            start = emb.event_time_ms - emb.event_time_ms % self.bucket_ms
            count, total = state.buckets.get(start, (0, np.zeros(emb.dim, np.float64)))
            state.buckets[start] = (count + 1, total + emb.array())
            state.newest_ms = max(state.newest_ms, emb.event_time_ms)
            last = emb
        if last is None:
            return None
        self._evict(state)
        count = sum(c for c, _ in state.buckets.values())
        if count == 0:
            return None
        mean = sum(s for _, s in state.buckets.values()) / count
        return UserAggregate.from_array(
            last.user_id,
            state.newest_ms,
            self.window_ms,
            count,
            last.model_version,
            np.asarray(mean, np.float32),
            VectorDtype(last.dtype),
        )

    def _evict(self, state: AggregateState) -> None:
        # A bucket [start, start + bucket) is kept while it overlaps (newest - window, newest].
        horizon = state.newest_ms - self.window_ms
        for start in [s for s in state.buckets if s + self.bucket_ms <= horizon]:
            del state.buckets[start]
        state.seen = {(i, t) for i, t in state.seen if t > horizon}
