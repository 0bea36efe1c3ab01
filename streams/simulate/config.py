"""Knobs of one simulation run (defaults = the documented SOLARIS defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field

from store.reader import ReaderConfig
from streams.engine.neighbours import NeighbourConfig
from streams.engine.speculator import SpeculatorConfig
from streams.engine.verifier import VerifierConfig

HOUR_MS = 3_600_000


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
    #: impressions at or after this event time are the test period (NE/AUC); None = no eval
    test_start_ms: int | None = None

    @property
    def pair_ttl_ms(self) -> int:
        return self.reader.pair_ttl_ms
