"""Coverage and speculation bookkeeping shared by the simulator and the live ranker."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store.tiers import TIER_NAMES, Tier


@dataclass(slots=True)
class CoverageCounter:
    """Counts of lookups by tier, with cumulative shares."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(Tier), np.int64))

    def add(self, tiers: np.ndarray) -> None:
        self.counts += np.bincount(tiers, minlength=len(Tier))[: len(Tier)]

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def shares(self) -> dict[str, float]:
        total = max(self.total, 1)
        return {name: float(c) / total for name, c in zip(TIER_NAMES, self.counts, strict=True)}

    def cumulative(self) -> dict[str, float]:
        s = self.shares()
        return {
            "exact": s["exact"],
            "with_aggregate": s["exact"] + s["aggregate"],
            "with_neighbours": s["exact"] + s["aggregate"] + s["neighbours"],
        }


@dataclass(slots=True)
class SpeculationLedger:
    """Embedded pairs and which of them were served as exact before expiry (precision)."""

    embedded: int = 0
    _served: set[tuple[int, int, int]] = field(default_factory=set)

    def on_embedded(self, n: int) -> None:
        self.embedded += n

    def on_served(
        self,
        user_id: int,
        item_ids: np.ndarray,
        ages_ms: np.ndarray,
        tiers: np.ndarray,
        event_time_ms: int,
    ) -> None:
        exact = tiers == Tier.EXACT
        for item, age in zip(item_ids[exact].tolist(), ages_ms[exact].tolist(), strict=True):
            self._served.add((user_id, item, event_time_ms - age))

    @property
    def served(self) -> int:
        """Distinct embeddings (user, item, event time) served as exact at least once."""
        return len(self._served)

    @property
    def precision(self) -> float:
        return len(self._served) / self.embedded if self.embedded else 0.0
