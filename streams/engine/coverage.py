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
        return cumulative_shares(self.shares())


def cumulative_shares(s: dict[str, float]) -> dict[str, float]:
    """Cumulative coverage from per-tier shares, in serving order: exact, + the decoded state,
    + aggregate, + neighbours' item embedding, + neighbours' aggregates (the simulator and the
    live summary report the same)."""
    with_state = s["exact"] + s.get("state", 0.0)
    return {
        "exact": s["exact"],
        "with_state": with_state,
        "with_aggregate": with_state + s["aggregate"],
        "with_neighbour_item": with_state + s["aggregate"] + s["neighbour_item"],
        "with_neighbours": with_state
        + s["aggregate"]
        + s["neighbour_item"]
        + s["neighbour_aggregate"],
    }


@dataclass(slots=True)
class SpeculationLedger:
    """Embedded pairs and which of them were served as exact before expiry (precision).

    Bounded for a long-running ranker: every ``prune_every`` calls, embeddings older than
    ``horizon_ms`` before the newest request (they can no longer be served as exact: the pair
    TTL is shorter) leave the set and are only counted.
    """

    embedded: int = 0
    #: at least the pair TTL; twice the default 4 h TTL leaves room for out-of-order requests
    horizon_ms: int = 8 * 3_600_000
    prune_every: int = 4096
    _served: set[tuple[int, int, int]] = field(default_factory=set)
    _retired: int = 0
    _calls: int = 0

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
        self._calls += 1
        if self._calls % self.prune_every == 0:
            cutoff = event_time_ms - self.horizon_ms
            old = {key for key in self._served if key[2] < cutoff}
            self._retired += len(old)
            self._served -= old

    @property
    def served(self) -> int:
        """Distinct embeddings (user, item, event time) served as exact at least once."""
        return len(self._served) + self._retired

    @property
    def precision(self) -> float:
        return self.served / self.embedded if self.embedded else 0.0
