"""Verification: the current VM scores proposals; only high-relevance pairs go on to the FM.

A pair passes when its score is >= ``threshold`` (if set) and it is within the request's best
``top_k`` (if set) and best ``top_fraction`` of its candidates (if set). Scoring is batched across
requests (one VM call per batch); selection stays per request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, get_args

import numpy as np

from models.features import HistoryArrays
from schemas.records import PairProposal
from streams.engine.recurrence import RecurrenceInputs, recurrence_key
from streams.settings import RankBy


class PairScorer(Protocol):
    """The verifier model (``vm`` ONNX). Blocking, pure, batched."""

    def score(
        self, user_ids: np.ndarray, item_ids: np.ndarray, event_time_ms: np.ndarray
    ) -> np.ndarray:
        """Probabilities float32 ``[B]`` for int64 ``[B]`` inputs."""
        ...


class HistoryPairScorer(Protocol):
    """A VM that also reads each row's user history (the fair VM: streaming user features,
    ``models.user_features``). Not run by any step: the simulator's transfer baseline."""

    def score(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[HistoryArrays] | None = None,
    ) -> np.ndarray:
        """Probabilities float32 ``[B]``; ``histories``: one per row, oldest first."""
        ...


RANKINGS: tuple[str, ...] = get_args(RankBy)


@dataclass(frozen=True, slots=True)
class VerifierConfig:
    threshold: float | None
    top_k: int | None
    top_fraction: float | None
    #: what orders the pairs kept per request: "recurrence" (the user's recent candidate lists
    #: plus the item prior, see :mod:`streams.engine.recurrence`; VM score breaks ties), the
    #: VM's score ("vm"), the item prior alone ("prior"), or prior × VM ("vm_x_prior"); the
    #: threshold always applies to the VM score
    rank_by: RankBy
    #: how long a user's candidate list counts in the pair rankings (event time)
    pair_memory_ms: int

    def __post_init__(self) -> None:
        if self.rank_by not in RANKINGS:
            raise ValueError(f"rank_by must be one of {RANKINGS}, got {self.rank_by!r}")

    def keep_count(self, n: int) -> int:
        keep = n
        if self.top_k is not None:
            keep = min(keep, self.top_k)
        if self.top_fraction is not None:
            keep = min(keep, math.ceil(self.top_fraction * n))
        return keep


@dataclass(slots=True)
class VerifierStats:
    scored: int = 0
    dropped_nonfinite: int = 0  #: pairs whose score (VM, or the ranking key) was NaN or infinite
    kept: int = 0
    dropped_threshold: int = 0
    dropped_rank: int = 0

    @property
    def drop_rate(self) -> float:
        return 1.0 - self.kept / self.scored if self.scored else 0.0


@dataclass(frozen=True, slots=True)
class Selection:
    """What the verifier kept of one group, and how many of its pairs it dropped for a NaN or
    infinite score (a broken model: the caller reports them per request)."""

    kept: list[PairProposal]
    nonfinite: int = 0


@dataclass(frozen=True, slots=True)
class Picked:
    """What the verifier kept of one group, without a record per pair: the kept positions in
    the group (ascending), their VM scores, and the pairs dropped for a non-finite score."""

    positions: list[int]
    scores: list[float]
    nonfinite: int = 0


class Verifier:
    """Scores and filters proposals; kept proposals carry their score."""

    def __init__(self, scorer: PairScorer, config: VerifierConfig) -> None:
        self.scorer = scorer
        self.config = config
        self.stats = VerifierStats()

    def verify_many(
        self,
        groups: Sequence[Sequence[PairProposal]],
        candidate_counts: Sequence[int] | None = None,
        recurrence: Sequence[RecurrenceInputs | None] | None = None,
    ) -> list[list[PairProposal]]:
        """The kept proposals of each group (:meth:`select_many`)."""
        return [s.kept for s in self.select_many(groups, candidate_counts, recurrence)]

    def select_many(
        self,
        groups: Sequence[Sequence[PairProposal]],
        candidate_counts: Sequence[int] | None = None,
        recurrence: Sequence[RecurrenceInputs | None] | None = None,
    ) -> list[Selection]:
        """:meth:`pick_many` over proposal records: the kept ones carry their score."""
        flat = [p for g in groups for p in g]
        picks = self.pick_many(
            np.fromiter((p.user_id for p in flat), np.int64, len(flat)),
            np.fromiter((p.item_id for p in flat), np.int64, len(flat)),
            np.fromiter((p.event_time_ms for p in flat), np.int64, len(flat)),
            [len(g) for g in groups],
            candidate_counts,
            recurrence,
        )
        return [
            Selection(
                [replace(g[k], score=s) for k, s in zip(pick.positions, pick.scores, strict=True)],
                pick.nonfinite,
            )
            for g, pick in zip(groups, picks, strict=True)
        ]

    def pick_many(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        sizes: Sequence[int],
        candidate_counts: Sequence[int] | None = None,
        recurrence: Sequence[RecurrenceInputs | None] | None = None,
    ) -> list[Picked]:
        """Verify several requests' pairs with one model call: the flat arrays hold the
        groups' pairs one group after another (``sizes``), no record per pair.

        ``candidate_counts`` (per group) is the base of ``top_fraction``; default the group size.
        ``recurrence`` (per group, aligned with its pairs): the inputs the speculate step
        attached, used unless ``rank_by`` is ``vm``; a group without them (a message from a
        writer that did not attach them) ranks as if nothing recurred: by the VM score.
        """
        if not len(item_ids):
            return [Picked([], []) for _ in sizes]
        scores = self.scorer.score(user_ids, item_ids, event_time_ms)
        self.stats.scored += len(item_ids)
        out: list[Picked] = []
        offset = 0
        for gi, n in enumerate(sizes):
            s = scores[offset : offset + n]
            offset += n
            base = n if candidate_counts is None else candidate_counts[gi]
            out.append(self._pick(s, base, None if recurrence is None else recurrence[gi]))
        return out

    def _pick(self, scores: np.ndarray, base: int, inputs: RecurrenceInputs | None) -> Picked:
        cfg = self.config
        key = scores.astype(np.float64)
        if cfg.rank_by != "vm":
            if inputs is None:
                inputs = RecurrenceInputs.none(len(scores))
            key = recurrence_key(cfg.rank_by, key, inputs.prior_counts, inputs.pair_counts)
        order = np.argsort(-key, kind="stable")
        finite = np.isfinite(key)
        nonfinite = 0
        if not finite.all():  # a broken score (NaN, +inf) must not take a valid pair's slot
            order = order[finite[order]]
            nonfinite = len(scores) - len(order)
            self.stats.dropped_nonfinite += nonfinite
        if cfg.threshold is not None:
            passing = order[scores[order] >= cfg.threshold]
            self.stats.dropped_threshold += len(order) - len(passing)
            order = passing
        keep = min(len(order), cfg.keep_count(base))
        self.stats.dropped_rank += len(order) - keep
        self.stats.kept += keep
        chosen = np.sort(order[:keep])
        return Picked(chosen.tolist(), scores[chosen].astype(np.float64).tolist(), nonfinite)
