"""Knobs of one simulation run (defaults = the documented SOLARIS defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field

from store.reader import ReaderConfig
from streams.engine.config import EngineConfig, reader_config
from streams.engine.neighbours import NeighbourConfig
from streams.engine.speculator import SpeculatorConfig
from streams.engine.verifier import VerifierConfig
from streams.settings import HOUR_MS, Settings


@dataclass(frozen=True, slots=True)
class SimConfig:
    speculator: SpeculatorConfig = field(default_factory=SpeculatorConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    neighbours: NeighbourConfig = field(default_factory=NeighbourConfig)
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    #: False = skip the VM and send every proposal to the FM (oracle runs)
    verify: bool = True
    use_neighbours: bool = True
    history_len: int = 20
    aggregate_window_ms: int = 24 * HOUR_MS
    aggregate_bucket_ms: int = HOUR_MS
    #: store TTL of user histories (written when vm_solaris reads streaming user features)
    history_store_ttl_ms: int = 30 * 24 * HOUR_MS
    #: impressions at or after this event time are the test period (NE/AUC); None = no eval
    test_start_ms: int | None = None

    @property
    def pair_ttl_ms(self) -> int:
        return self.reader.pair_ttl_ms

    @property
    def aggregate_store_ttl_ms(self) -> int:
        """Physical TTL of aggregates: as long as any tier may read them."""
        return max(self.reader.aggregate_ttl_ms, self.reader.neighbour_aggregate_ttl_ms)


def sim_config_from_settings(
    settings: Settings,
    dim: int,
    test_start_ms: int | None = None,
    model_version: str | None = None,
) -> SimConfig:
    """The simulator configured exactly like the live pipeline of ``settings``; pass the
    bundle's ``model_version`` so its reader is gated like the ranker's (see
    :func:`reader_config`; :func:`streams.simulate.run.simulate` gates it from the FM if not)."""
    engine = EngineConfig.from_settings(settings)
    return SimConfig(
        speculator=engine.speculator,
        verifier=engine.verifier,
        neighbours=engine.neighbours,
        reader=reader_config(settings, dim, model_version),
        history_len=settings.history_len,
        aggregate_window_ms=settings.aggregate_window_ms,
        history_store_ttl_ms=settings.history_store_ttl_ms,
        test_start_ms=test_start_ms,
    )
