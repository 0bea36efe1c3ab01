"""The ranker's step for one request: one tiered lookup, then ``vm_solaris`` scoring.

Pure apart from the reader's store access; records the tier of every candidate so coverage is
measured where it matters, at ranking time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from schemas.records import RequestEvent
from store.reader import FeatureReader
from store.tiers import Tier


class SolarisScorer(Protocol):
    """``vm_solaris`` (ONNX): VM features + FM embedding + one-hot tier. Blocking, batched."""

    def score(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        embeddings: np.ndarray,
        tiers: np.ndarray,
    ) -> np.ndarray:
        """Probabilities float32 ``[B]``."""
        ...


@dataclass(frozen=True, slots=True)
class RankResult:
    request_id: str
    user_id: int
    item_ids: np.ndarray  #: int64 [n]
    scores: np.ndarray  #: float32 [n]; empty when no scorer was given
    vectors: np.ndarray  #: float32 [n, dim] as served
    tiers: np.ndarray  #: uint8 [n]
    ages_ms: np.ndarray  #: int64 [n]
    read_ms: float  #: wall time of the lookup
    #: the lookup hit store trouble (timeout, store error, internal error) and served missing
    read_failed: bool = False


def needs_baseline(result: RankResult) -> bool:
    """Serve the plain VM instead of ``vm_solaris``: the read failed and nothing was served.

    A store outage makes every candidate "missing" at once, a state ``vm_solaris`` sees only
    for brand-new users and may score worse than the plain VM (the ranker the system had
    before). A request that is all missing on a healthy read keeps ``vm_solaris`` (that is
    what it was trained and evaluated on, and what the simulator serves).
    """
    return (
        result.read_failed and len(result.tiers) > 0 and bool(np.all(result.tiers == Tier.MISSING))
    )


def rank(
    request: RequestEvent,
    reader: FeatureReader,
    scorer: SolarisScorer | None = None,
    deadline_ms: float | None = None,
) -> RankResult:
    """Look up the request's candidates and score them (if ``scorer``)."""
    items = np.asarray(request.candidates, np.int64)
    troubles = _troubles(reader)
    start = time.perf_counter()
    vectors, tiers, ages = reader.lookup(
        request.user_id, request.candidates, request.event_time_ms, deadline_ms
    )
    read_ms = (time.perf_counter() - start) * 1000.0
    read_failed = _troubles(reader) > troubles
    scores = np.zeros(0, np.float32)
    if scorer is not None and len(items):
        n = len(items)
        scores = scorer.score(
            np.full(n, request.user_id, np.int64),
            items,
            np.full(n, request.event_time_ms, np.int64),
            vectors,
            tiers,
        )
    return RankResult(
        request.request_id,
        request.user_id,
        items,
        scores,
        vectors,
        tiers,
        ages,
        read_ms,
        read_failed,
    )


def _troubles(reader: FeatureReader) -> int:
    """The reader's count of lookups that hit trouble (it never raises; it counts)."""
    st = reader.stats
    return st.timeouts + st.store_errors + st.internal_errors
