"""Every engine knob, built once from :class:`~streams.settings.Settings`.

The live workers and the simulator build their stages from the same :class:`EngineConfig` and
the ranker and the simulator their reader from :func:`reader_config`, so parity needs no copy
of a default anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.reader import ReaderConfig
from store.values import version_tag
from streams.engine.neighbours import NeighbourConfig
from streams.engine.speculator import SpeculatorConfig
from streams.engine.verifier import VerifierConfig
from streams.settings import Settings


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
        deadline_ms=settings.read_deadline_ms,
        max_neighbours=settings.neighbours_k,
        neighbour_hints=settings.reader_neighbour_hints,
        version_tag=None if model_version is None else version_tag(model_version),
    )
