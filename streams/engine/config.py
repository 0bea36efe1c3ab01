"""Every engine knob, built once from :class:`~streams.settings.Settings`.

The live workers, the ranker and the simulator all take their knobs from one
:class:`EngineConfig`; the sub-configs (speculator, verifier, neighbours, reader) have no
defaults of their own, so a default exists in exactly one place: the ``Settings`` field.
:data:`ENGINE_DEFAULTS` is that configuration with every setting at its default (no
environment read), for tests and tools that need "the documented defaults".
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from store.reader import ReaderConfig
from store.values import version_tag
from streams.engine.neighbours import NeighbourConfig
from streams.engine.speculator import SpeculatorConfig
from streams.engine.steps.verify import VerifyKnobs
from streams.engine.verifier import VerifierConfig
from streams.settings import Settings


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Engine knobs shared by the live pipeline, the ranker and the simulator (parity needs the
    same ones, so both build this from ``Settings``)."""

    speculator: SpeculatorConfig
    verifier: VerifierConfig
    neighbours: NeighbourConfig
    reader: ReaderConfig
    history_len: int
    aggregate_window_ms: int
    aggregate_bucket_ms: int
    #: store TTL of user histories (written when vm_solaris reads streaming user features)
    history_store_ttl_ms: int
    #: event time past a table value's lifetime before it is deleted (:mod:`.steps.expiry`)
    table_expiry_grace_ms: int
    #: keys a user's aggregate state keeps (0: no limit; see ``RollingAggregator``)
    aggregate_max_keys: int = 20_000

    @classmethod
    def from_settings(
        cls, settings: Settings, dim: int | None = None, model_version: str | None = None
    ) -> EngineConfig:
        """``dim`` defaults to ``settings.embedding_dim``; ``model_version`` gates the reader
        (see :func:`reader_config`)."""
        return cls(
            SpeculatorConfig(
                strategies=tuple(settings.speculation_strategies.split(",")),
                budget=settings.speculation_budget,
                lookahead_items=settings.speculation_lookahead_items,
                refresh_after_ms=settings.refresh_after_ms,
                in_flight_ms=settings.pair_in_flight_timeout_ms,
            ),
            VerifierConfig(
                threshold=settings.verifier_threshold,
                top_k=settings.verifier_top_k,
                top_fraction=settings.verifier_top_fraction,
                rank_by=settings.verifier_rank_by,
                pair_memory_ms=settings.verifier_pair_memory_ms,
            ),
            neighbour_config(settings),
            reader_config(settings, settings.embedding_dim if dim is None else dim, model_version),
            history_len=settings.history_len,
            aggregate_window_ms=settings.aggregate_window_ms,
            aggregate_bucket_ms=settings.aggregate_bucket_ms,
            history_store_ttl_ms=settings.history_store_ttl_ms,
            table_expiry_grace_ms=settings.table_expiry_grace_ms,
            aggregate_max_keys=settings.aggregate_max_keys,
        )

    @classmethod
    def defaults(cls, dim: int | None = None) -> EngineConfig:
        """Every setting at its declared default (the environment is not read)."""
        return cls.from_settings(Settings.model_construct(), dim)

    @property
    def pair_ttl_ms(self) -> int:
        return self.reader.pair_ttl_ms

    @property
    def aggregate_store_ttl_ms(self) -> int:
        """Physical TTL of aggregates: as long as any tier may read them."""
        return max(self.reader.aggregate_ttl_ms, self.reader.neighbour_aggregate_ttl_ms)

    def verify_knobs(self) -> VerifyKnobs:
        """What the verify step needs besides the verifier: the same for both drivers."""
        return VerifyKnobs(
            self.speculator.refresh_after_ms,
            self.pair_ttl_ms,
            self.history_len,
            self.speculator.in_flight_ms,
        )

    def with_changes(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` (field names of this class)."""
        return replace(self, **changes)


ENGINE_FIELDS = frozenset(f.name for f in fields(EngineConfig))


def neighbour_config(settings: Settings) -> NeighbourConfig:
    """The neighbour tier's knobs (the neighbour job's and the ranker's cold-start index)."""
    return NeighbourConfig(
        k=settings.neighbours_k,
        min_similarity=settings.neighbour_min_similarity,
        exact_max=settings.neighbour_exact_max,
        interval_ms=settings.neighbour_interval_ms,
        growth_factor=settings.neighbour_growth_factor,
    )


def reader_config(settings: Settings, dim: int, model_version: str | None) -> ReaderConfig:
    """The ranker's reader knobs from settings (one place, so live and offline agree).

    ``model_version`` is the served bundle's: the reader then rejects values of any other FM
    (after an upgrade the old model's pairs, aggregates and neighbours' values would otherwise
    be served until their TTLs ran out). None accepts any version (tools without a bundle).
    """
    return ReaderConfig(
        dim=dim,
        pair_ttl_ms=settings.pair_ttl_ms,
        aggregate_ttl_ms=settings.aggregate_ttl_ms,
        neighbour_aggregate_ttl_ms=settings.neighbour_aggregate_ttl_ms,
        neighbour_ttl_ms=settings.neighbour_ttl_ms,
        state_ttl_ms=settings.state_ttl_ms,
        deadline_ms=settings.read_deadline_ms,
        max_neighbours=settings.neighbours_k,
        max_neighbour_pair_keys=settings.reader_max_neighbour_pair_keys,
        version_tag=None if model_version is None else version_tag(model_version),
        neighbour_hints=settings.reader_neighbour_hints,
    )


ENGINE_DEFAULTS = EngineConfig.defaults()
"""The documented defaults (every ``Settings`` field at its default)."""
