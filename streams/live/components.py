"""The engine objects one worker process needs, built once from settings and models."""

from __future__ import annotations

from store.protocol import FeatureStore
from streams.codecs import make_codec
from streams.engine.config import EngineConfig
from streams.engine.models import EngineModels
from streams.engine.stages import build_stages
from streams.engine.steps.neighbours import NeighbourState
from streams.live.stats import STATS_BACKENDS, LiveStats
from streams.live.table_clocks import PartitionClocks
from streams.settings import Settings


class Components:
    """Per-process engine state that is not in Faust tables (models, counters, local stats)."""

    def __init__(self, settings: Settings, models: EngineModels, store: FeatureStore) -> None:
        cfg = EngineConfig.from_settings(settings, models.fm.dim)
        self.settings = settings
        self.config = cfg
        self.models = models
        self.store = store
        self.codec = make_codec(settings)
        # The pair memories (the ``recent`` table) and the item prior (their lists' counts,
        # rebuilt from that table after a start or a rebalance) are read and written by the
        # requests agent only; it attaches their counts to the proposals.
        self.stages = build_stages(
            cfg.speculator,
            cfg.verifier,
            models,
            cfg.aggregate_window_ms,
            cfg.aggregate_bucket_ms,
            aggregate_max_keys=cfg.aggregate_max_keys,
        )
        self.knobs = cfg.verify_knobs()
        self.reps = self.stages.reps
        #: newest event time seen by this worker (drives event-time decisions in timers)
        self.now_ms = 0
        #: per table and partition, the newest event time its writing agent processed (the
        #: table sweep's clocks: streams.live.table_expiry)
        self.table_clocks = PartitionClocks()
        #: cross-process totals for `solaris coverage` and the demo (Redis stores only)
        self.stats = (
            LiveStats(settings, "pipeline") if settings.store_backend in STATS_BACKENDS else None
        )
        self._pending: dict[str, int | float] = {}
        #: the neighbour step's state for this worker's users (None without the neighbour tier)
        self.neighbours = NeighbourState.new(cfg, self.reps) if self.reps is not None else None
        #: user -> event time of their newest aggregate (this worker's users), written by the
        #: aggregate agent: the neighbour state's own dict, so the index's population
        self.aggregate_times: dict[int, int] = (
            self.neighbours.newest if self.neighbours is not None else {}
        )

    def count(self, **counts: int) -> None:
        """Add to the shared counters; the worker's 1 s timer publishes them (one round trip)."""
        if self.stats is None:
            return
        for key, value in counts.items():
            self._pending[key] = self._pending.get(key, 0) + value

    def take_counts(self) -> dict[str, int | float]:
        """The counts since the last call (swapped on the event loop: no lock needed)."""
        pending, self._pending = self._pending, {}
        return pending

    def publish_counts(self, counts: dict[str, int | float]) -> None:
        """Add ``counts`` to the shared stats hash (blocking: call it off the event loop)."""
        if self.stats is not None and counts:
            self.stats.add(counts)

    def flush_counts(self) -> None:
        """Publish what is pending now (blocking; for shutdown and tests)."""
        self.publish_counts(self.take_counts())
