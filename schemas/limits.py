"""Size and range limits enforced on every record, so one bad producer cannot hurt consumers."""

from __future__ import annotations

from dataclasses import dataclass

# Event times outside [1990-01-01, 2200-01-01) are treated as corrupt, not as data.
MIN_EVENT_TIME_MS = 631_152_000_000
MAX_EVENT_TIME_MS = 7_258_118_400_000


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-record limits; defaults suit a final-stage ranker (hundreds of candidates)."""

    max_candidates: int = 1_000
    max_dim: int = 1_024
    max_neighbours: int = 256
    max_string_len: int = 256
    max_lookahead: int = 256
    max_history: int = 1_024
