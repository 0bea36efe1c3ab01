"""The reader's knobs and counters (``store.reader`` re-exports both): kept apart so the
lookup logic module stays one job."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store.tiers import Tier


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """Freshness and cost knobs of the reader. No defaults here: they are declared once, in
    ``streams.settings.Settings``, and built by ``streams.engine.config`` (tests: its
    ``ENGINE_DEFAULTS``)."""

    dim: int
    pair_ttl_ms: int
    aggregate_ttl_ms: int
    #: max age of a *neighbour's* aggregate in the neighbour tier: it only imitates the user's
    #: embedding, so older values still beat "missing" (the VM sees the tier)
    neighbour_aggregate_ttl_ms: int
    neighbour_ttl_ms: int
    #: max age of a user's stored FM state served by the state tier (with a decoder)
    state_ttl_ms: int
    deadline_ms: float
    #: neighbours used per request (best first)
    max_neighbours: int
    #: cap on (neighbour, item) pair keys in round 2; above it only neighbour aggregates are read
    max_neighbour_pair_keys: int
    #: accept only values of this model version (CRC32 tag); None accepts any
    version_tag: int | None
    #: users remembered with the neighbours their last lookup read (0 = off, the default); see
    #: :meth:`FeatureReader._fill`. Saves the second round trip only when the same user comes
    #: back to the same reader while remembered (a ranker with user affinity), and costs extra
    #: round-1 keys otherwise: opt in with ``SOLARIS_READER_NEIGHBOUR_HINTS``.
    neighbour_hints: int


@dataclass(slots=True)
class ReaderStats:
    """Counters since construction; the ranker service exports them as metrics."""

    calls: int = 0
    lookups: int = 0
    round_trips: int = 0
    #: lookups that missed their deadline (the store timed out, or the lookup ended late)
    timeouts: int = 0
    #: lookups that hit any other store error (refused, reset, no open connection, ...)
    store_errors: int = 0
    #: stored values that failed a check (checksum, format, bounds, NaN): never served
    corrupt_values: int = 0
    #: lookups that hit an unexpected error (a bug or a bad snapshot): served as missing
    internal_errors: int = 0
    cold_start_queries: int = 0
    #: lookups whose neighbour values came with round 1 (a hint matched): no second round trip
    hinted_neighbour_reads: int = 0
    #: state-tier decodes that failed or gave non-finite vectors (the next tier served)
    state_decode_errors: int = 0
    tiers: np.ndarray = field(default_factory=lambda: np.zeros(len(Tier), dtype=np.int64))
