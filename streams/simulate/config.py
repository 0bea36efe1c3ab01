"""Knobs of one simulation run: the live pipeline's :class:`EngineConfig` plus the run's own."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from store.reader import ReaderConfig
from streams.engine.config import ENGINE_FIELDS, EngineConfig
from streams.engine.neighbours import NeighbourConfig
from streams.engine.speculator import SpeculatorConfig
from streams.engine.verifier import VerifierConfig
from streams.settings import Settings


@dataclass(frozen=True, slots=True)
class SimConfig:
    """``engine`` is exactly what the live pipeline runs with (default: every setting at its
    default); the other fields are the simulation's own."""

    engine: EngineConfig = field(default_factory=EngineConfig.defaults)
    #: False = skip the VM and send every proposal to the FM (oracle runs)
    verify: bool = True
    use_neighbours: bool = True
    #: impressions at or after this event time are the test period (NE/AUC); None = no eval
    test_start_ms: int | None = None

    def with_changes(self, **changes: Any) -> SimConfig:
        """A copy with ``changes``: engine field names (``reader=``, ``verifier=``, …) go to
        the engine, the others to this config."""
        engine = {k: v for k, v in changes.items() if k in ENGINE_FIELDS}
        own = {k: v for k, v in changes.items() if k not in ENGINE_FIELDS}
        return replace(self, engine=self.engine.with_changes(**engine), **own)

    @property
    def speculator(self) -> SpeculatorConfig:
        return self.engine.speculator

    @property
    def verifier(self) -> VerifierConfig:
        return self.engine.verifier

    @property
    def neighbours(self) -> NeighbourConfig:
        return self.engine.neighbours

    @property
    def reader(self) -> ReaderConfig:
        return self.engine.reader

    @property
    def history_len(self) -> int:
        return self.engine.history_len

    @property
    def aggregate_window_ms(self) -> int:
        return self.engine.aggregate_window_ms

    @property
    def aggregate_bucket_ms(self) -> int:
        return self.engine.aggregate_bucket_ms

    @property
    def history_store_ttl_ms(self) -> int:
        return self.engine.history_store_ttl_ms

    @property
    def pair_ttl_ms(self) -> int:
        return self.engine.pair_ttl_ms

    @property
    def aggregate_store_ttl_ms(self) -> int:
        return self.engine.aggregate_store_ttl_ms


def sim_config_from_settings(
    settings: Settings,
    dim: int,
    test_start_ms: int | None = None,
    model_version: str | None = None,
) -> SimConfig:
    """The simulator configured exactly like the live pipeline of ``settings``; pass the
    bundle's ``model_version`` so its reader is gated like the ranker's (see
    :func:`~streams.engine.config.reader_config`; :func:`streams.simulate.run.simulate` gates it
    from the FM if not)."""
    return SimConfig(
        EngineConfig.from_settings(settings, dim, model_version), test_start_ms=test_start_ms
    )
