"""Incremental, leakage-free retrieval state for the interaction-log → traffic converter.

Both indexes are fed interactions strictly in event-time order and only ever answer questions
about what they have been fed, so a request at time ``t`` sees nothing at or after ``t`` as long
as the caller feeds only interactions with ``ts < t`` before asking (``convert`` does).
Ties are broken by item id, never by container order, so answers depend only on the fed prefix.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque

import numpy as np


class CovisitIndex:
    """Bounded item-to-item co-visitation counts plus each user's recent items.

    Two items are co-visited when one user interacts with both within ``window`` consecutive
    interactions. Each item keeps at most ``max_neighbours`` neighbours: when its list grows to
    twice that, it is pruned to the top ``max_neighbours`` by count (ties: lower item id), which
    bounds memory and makes an update O(window) amortised instead of quadratic in history.
    """

    def __init__(
        self, window: int, recent: int, max_neighbours: int, recency_decay: float = 1.0
    ) -> None:
        self.window = window
        self.recency_decay = recency_decay
        self.max_neighbours = max_neighbours
        self.neighbours: defaultdict[int, dict[int, int]] = defaultdict(dict)
        self.history: defaultdict[int, deque[int]] = defaultdict(
            lambda: deque(maxlen=max(window, recent))
        )
        self.recent = recent

    def add(self, user: int, item: int) -> None:
        """Record that ``user`` interacted with ``item`` (call in event-time order)."""
        hist = self.history[user]
        for other in list(hist)[-self.window :]:
            if other != item:
                self._bump(item, other)
                self._bump(other, item)
        if not hist or hist[-1] != item:  # a pv followed by a cart of one item is one visit
            hist.append(item)

    def _bump(self, item: int, other: int) -> None:
        counts = self.neighbours[item]
        counts[other] = counts.get(other, 0) + 1
        if len(counts) >= 2 * self.max_neighbours:
            keep = heapq.nsmallest(
                self.max_neighbours, counts.items(), key=lambda kv: (-kv[1], kv[0])
            )
            self.neighbours[item] = dict(keep)

    def recent_items(self, user: int) -> list[int]:
        """The user's last ``recent`` distinct items, most recent first."""
        seen: list[int] = []
        for item in reversed(self.history.get(user, ())):
            if item not in seen:
                seen.append(item)
                if len(seen) == self.recent:
                    break
        return seen

    def retrieve(self, user: int, n: int, exclude: set[int]) -> list[int]:
        """Top ``n`` co-visitation neighbours of the user's recent items, best first.

        Score of a neighbour = sum over recent items of count × ``recency_decay ** rank`` (rank 0
        = the most recent item), so recent items weigh more without the list jumping whenever
        the user touches one new item.
        """
        if n <= 0:
            return []
        keys: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        for rank, seed_item in enumerate(self.recent_items(user)):
            counts = self.neighbours.get(seed_item)
            if counts:
                keys.append(np.fromiter(counts.keys(), dtype=np.int64, count=len(counts)))
                vals.append(
                    np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
                    * self.recency_decay**rank
                )
        if not keys:
            return []
        uniq, inverse = np.unique(np.concatenate(keys), return_inverse=True)
        scores = np.bincount(inverse, weights=np.concatenate(vals))
        # best first, ties: lower id
        return _first_n(uniq[np.lexsort((uniq, -scores))].tolist(), n, exclude)


class PopularityIndex:
    """Exponentially time-decayed item popularity with a periodically recomputed top pool.

    Each interaction adds ``2 ** ((ts - ref) / half_life)`` to its item; ranking by these sums
    equals ranking by decayed counts at any later time, with no per-item decay step. ``ref``
    moves forward (rescaling every score) before the weights could overflow.

    The pool (the top ``pool`` items) is recomputed at most once per ``refresh_ms`` of event
    time, like a periodic trending-items job: :meth:`refresh_if_due` at a request's time
    recomputes it from what was fed so far when the request falls in a new period (or, while
    the log is too young to fill the pool, at every request).
    """

    def __init__(self, items: np.ndarray, half_life_ms: float, pool: int, refresh_ms: int) -> None:
        self.items = items  # sorted unique item ids; index = position in this array
        self.score = np.zeros(items.shape[0], dtype=np.float64)
        self.half_life_ms = half_life_ms
        self.pool_size = pool
        self.refresh_ms = refresh_ms
        self.ref_ms: int | None = None
        self.added_since_refresh = 0
        self.pool_period: int | None = None
        self.pool_items = np.zeros(0, dtype=np.int64)
        self.pool_logw = np.zeros(0, dtype=np.float64)

    def add(self, item: int, ts_ms: int) -> None:
        """Count one interaction with ``item`` at ``ts_ms`` (call in event-time order)."""
        if self.ref_ms is None:
            self.ref_ms = ts_ms
        exponent = (ts_ms - self.ref_ms) / self.half_life_ms
        if exponent > 500.0:  # 2**500 ~ 1e150: rescale long before float64 overflows
            self.score *= 2.0 ** (-exponent)
            self.ref_ms = ts_ms
            exponent = 0.0
        idx = int(np.searchsorted(self.items, item))
        self.score[idx] += 2.0**exponent
        self.added_since_refresh += 1

    def _refresh(self) -> None:
        positive = np.flatnonzero(self.score > 0)
        if positive.shape[0] > self.pool_size:
            cut = np.partition(self.score[positive], -self.pool_size)[-self.pool_size]
            positive = positive[self.score[positive] >= cut]
        order = np.lexsort((self.items[positive], -self.score[positive]))[: self.pool_size]
        chosen = positive[order]
        self.pool_items = self.items[chosen]
        self.pool_logw = np.log(self.score[chosen] / self.score[chosen].max())
        self.added_since_refresh = 0

    def refresh_if_due(self, now_ms: int) -> None:
        """Recompute the pool if anything was fed since the last time and ``now_ms`` is in a new
        refresh period or the pool is not full yet (cold start at the beginning of a log)."""
        period = now_ms // self.refresh_ms
        warming = self.pool_items.shape[0] < self.pool_size
        if self.added_since_refresh > 0 and (period != self.pool_period or warming):
            self._refresh()
            self.pool_period = period

    def top(self, n: int, exclude: set[int]) -> list[int]:
        """The ``n`` most popular pool items not in ``exclude``, most popular first."""
        return _first_n(self.pool_items.tolist(), n, exclude)

    def sample(self, n: int, exclude: set[int], rng: np.random.Generator) -> list[int]:
        """Up to ``n`` pool items drawn without replacement, weight ∝ decayed popularity
        (Gumbel-top-k)."""
        pool = self.pool_items
        if n <= 0 or pool.shape[0] == 0:
            return []
        u = rng.random(pool.shape[0])
        keys = self.pool_logw - np.log(-np.log(np.maximum(u, 1e-300)))
        return _first_n(pool[np.argsort(-keys, kind="stable")].tolist(), n, exclude)


def _first_n(ranked: list[int], n: int, exclude: set[int]) -> list[int]:
    """The first ``n`` items of ``ranked`` that are not in ``exclude``."""
    out: list[int] = []
    if n <= 0:
        return out
    for item in ranked:
        if item not in exclude:
            out.append(item)
            if len(out) == n:
                break
    return out


def half_life_ms(days: float) -> float:
    """Days → milliseconds, rejecting non-positive values."""
    if not (days > 0 and math.isfinite(days)):
        raise ValueError(f"half-life must be a positive number of days, got {days}")
    return days * 86_400_000.0
