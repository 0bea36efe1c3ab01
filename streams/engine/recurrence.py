"""A recurrence prior: how often an item has recently appeared in candidate lists.

The VM scores *relevance*; which pairs will be *asked for again* depends on the retrieval that
builds candidate lists, and items that retrieval keeps returning come back. Measured on
ml-latest-small at a 20 % budget: random selection 0.343 exact coverage, VM 0.333, this prior
0.374; on Taobao (first 30k requests, 50 % budget) 0.088 / 0.079 / 0.102 — but it picks fewer of
the items users then engage with, so the default verifier ranking stays the VM's.
Counts decay exponentially in event time; in the live pipeline each worker counts the requests
of its own partitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from streams.engine.lookahead import DecayedCounter


class RecurrencePrior:
    """Decayed frequency of items in recent candidate lists (half-life in event time)."""

    def __init__(self, half_life_ms: int = 6 * 3_600_000) -> None:
        self._counts = DecayedCounter(half_life_ms)

    def observe(self, item_ids: Sequence[int], event_time_ms: int) -> None:
        """Count one request's candidate list (call before verifying that request)."""
        for item in item_ids:
            self._counts.add(int(item), event_time_ms)

    def scores(self, item_ids: Sequence[int]) -> np.ndarray:
        """Relative recurrence scores in [0, 1], float64 ``[n]`` (max = 1 within the call)."""
        raw = np.array([self._counts.value(int(i)) for i in item_ids], np.float64)
        top = raw.max() if raw.size else 0.0
        return raw / top if top > 0 else raw
