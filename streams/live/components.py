"""The engine objects one worker process needs, built once from settings and models."""

from __future__ import annotations

import time
from dataclasses import dataclass

from schemas.codec import Codec
from schemas.limits import Limits
from store.protocol import FeatureStore
from streams.engine.aggregator import RollingAggregator
from streams.engine.embedder import Embedder
from streams.engine.lookahead import Lookahead
from streams.engine.neighbours import NeighbourConfig, UserRepresentations
from streams.engine.recurrence import RecurrencePrior
from streams.engine.speculator import Speculator, SpeculatorConfig
from streams.engine.verifier import Verifier, VerifierConfig
from streams.live.stats import LiveStats
from streams.settings import Settings
from streams.simulate.simulator import SimModels


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Engine knobs shared by the live pipeline and the simulator (parity needs the same ones)."""

    speculator: SpeculatorConfig
    verifier: VerifierConfig
    neighbours: NeighbourConfig

    @classmethod
    def from_settings(cls, settings: Settings) -> EngineConfig:
        return cls(
            SpeculatorConfig(
                strategies=tuple(settings.speculation_strategies.split(",")),
                budget=settings.speculation_budget,
                refresh_after_ms=settings.refresh_after_ms,
            ),
            VerifierConfig(
                threshold=settings.verifier_threshold,
                top_k=settings.verifier_top_k,
                top_fraction=settings.verifier_top_fraction,
                rank_by=settings.verifier_rank_by,
            ),
            NeighbourConfig(
                k=settings.neighbours_k,
                min_similarity=settings.neighbour_min_similarity,
                interval_ms=settings.neighbour_interval_ms,
                growth_factor=settings.neighbour_growth_factor,
            ),
        )


class Components:
    """Per-process engine state that is not in Faust tables (models, counters, local stats)."""

    def __init__(self, settings: Settings, models: SimModels, store: FeatureStore) -> None:
        cfg = EngineConfig.from_settings(settings)
        self.settings = settings
        self.config = cfg
        self.models = models
        self.store = store
        self.codec = Codec(Limits(max_candidates=settings.max_candidates))
        self.lookahead = Lookahead() if "lookahead" in cfg.speculator.strategies else None
        self.speculator = Speculator(cfg.speculator, self.lookahead)
        # The recurrence prior is fed by the requests agent and read by the verify agent of the
        # same worker (same partitions), in the simulator's order.
        self.prior = RecurrencePrior() if cfg.verifier.rank_by != "vm" else None
        self.verifier = (
            Verifier(models.vm, cfg.verifier, self.prior) if models.vm is not None else None
        )
        self.embedder = Embedder(models.fm)
        self.aggregator = RollingAggregator(settings.aggregate_window_ms)
        self.reps = UserRepresentations(models.items) if models.items is not None else None
        #: newest event time seen by this worker (drives event-time decisions in timers)
        self.now_ms = 0
        #: cross-process totals for `solaris coverage` and the demo (Redis stores only)
        self.stats = LiveStats(settings, "pipeline") if settings.store_backend == "redis" else None
        self._pending: dict[str, int] = {}
        self._flushed_at = 0.0
        #: user -> event time of their newest aggregate (this worker's users), for the KNN index
        self.aggregate_times: dict[int, int] = {}

    def count(self, **counts: int) -> None:
        """Add to the shared counters; flushed at most once a second (one Redis round trip)."""
        if self.stats is None:
            return
        for key, value in counts.items():
            self._pending[key] = self._pending.get(key, 0) + value
        now = time.monotonic()
        if now - self._flushed_at >= 1.0:
            self.flush_counts()
            self._flushed_at = now

    def flush_counts(self) -> None:
        if self.stats is not None and self._pending:
            self.stats.add(dict(self._pending))
            self._pending.clear()
