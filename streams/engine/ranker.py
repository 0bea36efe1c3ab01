"""The ranker's step for one request: one tiered lookup, then ``vm_solaris`` scoring.

Pure apart from the reader's store access; records the tier of every candidate so coverage is
measured where it matters, at ranking time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from models.features import HistoryArrays
from schemas.records import RequestEvent
from store.history_values import StoredHistory
from store.reader import FeatureReader
from store.tiers import UNAVAILABLE_CODE, Tier


class SolarisScorer(Protocol):
    """``vm_solaris`` (ONNX): VM features + FM embedding + one-hot tier. Blocking, batched.

    A *fair* one (an attribute ``user_features`` that is True) also reads each row's user
    history (oldest first, any length: the scorer cuts it before the row's event time), from
    which it computes the streaming user features a production VM has without the FM
    (``models.user_features``); other scorers need not accept ``histories``.
    """

    def score(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        embeddings: np.ndarray,
        tiers: np.ndarray,
        histories: Sequence[HistoryArrays] | None = None,
    ) -> np.ndarray:
        """Probabilities float32 ``[B]``."""
        ...


def reads_history(scorer: object) -> bool:
    """The scorer computes streaming user features, so the ranker must read the history."""
    return bool(getattr(scorer, "user_features", False))


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
    #: the user's stored history, read in the same round trip when the scorer needs it
    history: StoredHistory | None = None
    #: the read failed and the scorer's own baseline VM scored the rows it left missing
    baseline_in_graph: bool = False


def needs_baseline(result: RankResult) -> bool:
    """Serve the plain VM instead of ``vm_solaris``: the read failed and nothing was served.

    A store outage makes every candidate "missing" at once, a state ``vm_solaris`` sees only
    for brand-new users and may score worse than the plain VM (the ranker the system had
    before). A request that is all missing on a healthy read keeps ``vm_solaris`` (that is
    what it was trained and evaluated on, and what the simulator serves).
    """
    if result.baseline_in_graph:  # vm_solaris already scored them with its (fair) baseline
        return False
    return (
        result.read_failed and len(result.tiers) > 0 and bool(np.all(result.tiers == Tier.MISSING))
    )


def rank(
    request: RequestEvent,
    reader: FeatureReader,
    scorer: SolarisScorer | None = None,
    deadline_ms: float | None = None,
) -> RankResult:
    """Look up the request's candidates and score them (if ``scorer``).

    A scorer with streaming user features gets the user's history from the same round trip
    (an empty one, as for a new user, when the read failed). When the read failed, a scorer
    with a baseline VM in its graph (``baseline_on_unavailable``) gets the rows left missing as
    unavailable and scores them with that VM; others are replaced by the plain VM
    (:func:`needs_baseline`).
    """
    items = np.asarray(request.candidates, np.int64)
    troubles = _troubles(reader)
    start = time.perf_counter()
    history: StoredHistory | None = None
    if reads_history(scorer):
        found = reader.lookup_with_history(
            request.user_id, request.candidates, request.event_time_ms, deadline_ms
        )
        (vectors, tiers, ages), history = found.lookup, found.history
    else:
        vectors, tiers, ages = reader.lookup(
            request.user_id, request.candidates, request.event_time_ms, deadline_ms
        )
    read_ms = (time.perf_counter() - start) * 1000.0
    read_failed = _troubles(reader) > troubles
    scores = np.zeros(0, np.float32)
    in_graph = _baseline_in_graph(read_failed, scorer, tiers)
    if scorer is not None and len(items):
        n = len(items)
        user_history = history if history is not None else StoredHistory.empty()
        scored_tiers = (
            np.where(tiers == Tier.MISSING, UNAVAILABLE_CODE, tiers) if in_graph else tiers
        )
        scores = scorer.score(
            np.full(n, request.user_id, np.int64),
            items,
            np.full(n, request.event_time_ms, np.int64),
            vectors,
            scored_tiers,
            **({"histories": [user_history] * n} if reads_history(scorer) else {}),
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
        history,
        in_graph,
    )


def _baseline_in_graph(read_failed: bool, scorer: object, tiers: np.ndarray) -> bool:
    """The scorer's own baseline VM scores the rows a failed read left missing; none left (a
    lookup that served every row but ended past its deadline) = none scored by it."""
    return (
        read_failed
        and bool(getattr(scorer, "baseline_on_unavailable", False))
        and bool((tiers == Tier.MISSING).any())
    )


def _troubles(reader: FeatureReader) -> int:
    """The reader's count of lookups that hit trouble (it never raises; it counts)."""
    st = reader.stats
    return st.timeouts + st.store_errors + st.internal_errors
