"""Look-ahead sources for speculation: item co-visitation and trending items, in event time.

Both are counted from impressions as they stream by (only the past), with exponential decay so
old co-visits and old popularity fade. In the live pipeline each worker keeps its own counts over
the users of its partitions: an approximation of the global counts that needs no shuffle.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import repeat

import numpy as np

from streams.engine.undo import UndoLog


class DecayedCounter:
    """Counts with exponential time decay (half-life in event-time ms)."""

    def __init__(self, half_life_ms: int) -> None:
        self._rate = math.log(2) / half_life_ms
        self._score: dict[int, float] = {}
        self._t0: int | None = None
        #: records every change while a batch runs (:mod:`streams.engine.undo`); None = off
        self.undo: UndoLog | None = None

    def add(self, key: int, event_time_ms: int, weight: float = 1.0) -> None:
        undo = self.undo
        if self._t0 is None:
            if undo is not None:
                undo.attribute(self, "_t0")
            self._t0 = event_time_ms
        exponent = self._rate * (event_time_ms - self._t0)
        if exponent > 200:  # rebase before the growing weights overflow a float
            if undo is not None:
                undo.attribute(self, "_t0")
                undo.attribute(self, "_score")
            shrink = math.exp(-exponent)
            self._score = {k: v * shrink for k, v in self._score.items() if v * shrink > 1e-12}
            self._t0, exponent = event_time_ms, 0.0
        # Scores are stored relative to t0 (growing weights) so old ones need no update.
        if undo is not None:
            undo.entry(self._score, key)
        self._score[key] = self._score.get(key, 0.0) + weight * math.exp(exponent)
        if len(self._score) > 200_000:
            self._prune()

    def add_many(self, keys: Iterable[int], event_time_ms: int) -> None:
        """:meth:`add` of each key in order, with weight 1 (the same floats: the rebase and the
        increment depend on the event time only, so they are computed once)."""
        keys = [int(k) for k in keys]
        if not keys:
            return
        self.add(keys[0], event_time_ms)  # t0, rebase and the undo of those, once
        assert self._t0 is not None
        increment = math.exp(self._rate * (event_time_ms - self._t0))
        if self.undo is not None:  # a prune below records the whole dict it replaces
            self.undo.entries(self._score, keys[1:])
        for key in keys[1:]:
            score = self._score
            score[key] = score.get(key, 0.0) + increment
            if len(score) > 200_000:
                self._prune()

    def _prune(self) -> None:
        if self.undo is not None:
            self.undo.attribute(self, "_score")
        keep = heapq.nlargest(100_000, self._score.items(), key=lambda kv: kv[1])
        self._score = dict(keep)

    def value(self, key: int) -> float:
        """Current (relative) score of ``key``; 0 when never seen."""
        return self._score.get(key, 0.0)

    def values(self, keys: Sequence[int]) -> np.ndarray:
        """:meth:`value` of each key, float64 ``[n]``, in one C-level pass over the keys (a
        NumPy integer key finds the same entry: it hashes and compares as the Python int)."""
        return np.fromiter(map(self._score.get, keys, repeat(0.0)), np.float64, len(keys))

    def top(self, n: int, exclude: set[int] | None = None) -> list[int]:
        exclude = exclude or set()
        best = heapq.nlargest(n + len(exclude), self._score.items(), key=lambda kv: kv[1])
        return [k for k, _ in best if k not in exclude][:n]


class CoVisitation:
    """Item -> items engaged by the same user within ``window_ms`` (bounded neighbour lists)."""

    def __init__(self, window_ms: int = 3_600_000, max_neighbours: int = 50) -> None:
        self.window_ms = window_ms
        self.max_neighbours = max_neighbours
        self._pairs: dict[int, dict[int, float]] = defaultdict(dict)

    def add_session(
        self, recent_items: list[tuple[int, int]], item_id: int, event_time_ms: int
    ) -> None:
        """Count ``item_id`` as co-visited with the user's recent ``(item, time)`` engagements."""
        for other, t in recent_items:
            if other == item_id or event_time_ms - t > self.window_ms:
                continue
            for a, b in ((other, item_id), (item_id, other)):
                row = self._pairs[a]
                row[b] = row.get(b, 0.0) + 1.0
                if len(row) > 2 * self.max_neighbours:
                    kept = heapq.nlargest(self.max_neighbours, row.items(), key=lambda kv: kv[1])
                    self._pairs[a] = dict(kept)

    def neighbours(self, item_id: int, n: int) -> list[int]:
        row = self._pairs.get(item_id)
        if not row:
            return []
        return [k for k, _ in heapq.nlargest(n, row.items(), key=lambda kv: kv[1])]


class Lookahead:
    """Co-visitation neighbours of what the user just engaged with, then trending items."""

    def __init__(
        self, covisit_window_ms: int = 3_600_000, trending_half_life_ms: int = 3_600_000
    ) -> None:
        self.covisit = CoVisitation(covisit_window_ms)
        self.trending = DecayedCounter(trending_half_life_ms)

    def observe(
        self, recent_positive: list[tuple[int, int]], item_id: int, label: int, event_time_ms: int
    ) -> None:
        """Feed one impression; ``recent_positive`` = the user's earlier engaged ``(item, time)``."""
        self.trending.add(item_id, event_time_ms, 1.0 + label)
        if label:
            self.covisit.add_session(recent_positive, item_id, event_time_ms)

    def propose(self, recent_positive_items: list[int], n: int, exclude: set[int]) -> list[int]:
        """Up to ``n`` items: co-visited with the newest engagements first, then trending."""
        out: list[int] = []
        seen = set(exclude)
        for item in reversed(recent_positive_items):
            for nb in self.covisit.neighbours(item, n):
                if nb not in seen:
                    out.append(nb)
                    seen.add(nb)
                if len(out) >= n:
                    return out
        out.extend(self.trending.top(n - len(out), seen))
        return out
