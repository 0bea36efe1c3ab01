"""Recurrence scores: which of a request's candidates will be asked for again soon.

The VM scores *relevance*; which pairs come back depends on the retrieval that builds candidate
lists. Two cheap signals, both known at speculation time:

* the **pair memory** (:class:`PairMemory`): in how many of *this user's* last few candidate
  lists the item already appeared (items retrieval keeps returning to this user). It is per-user
  state: the live workers keep it in the ``recent`` table (:mod:`streams.engine.state`), the
  simulator in a dict, so a restarted or rebalanced worker reads back exactly what the
  simulator holds;
* the **item prior** (:class:`ItemPrior`): in how many of *everyone's* remembered candidate
  lists of the last few hours the item appears (items retrieval keeps returning to everybody:
  trending, popular). It counts exactly the lists the users' pair memories hold, so it is a
  view of table state: a restarted or rebalanced worker rebuilds it from the ``recent`` table
  (:meth:`ItemPrior.rebuild`) and holds the counts an uninterrupted one holds. With several
  workers each counts the memories of its own partitions' users, an approximation of the
  simulator's global count; ``rank_by="pair"`` ranks by the pair memory alone, so no worker's
  share of the users changes its choice.

Measured with ``solaris simulate --sweep`` when the prior was a decayed count of every list a
process saw (4 h TTL, exact coverage over all candidates at a 10 % per-request budget; random
selection / the VM's relevance ranking / this score / a verifier that knows the future):
ml-latest-small 0.220 / 0.207 / 0.282 / 0.341, Taobao 0.035 / 0.033 / 0.048 / 0.055. At a 50 %
budget the gaps narrow (random already gets ~90 % of the ceiling on MovieLens). The counts over
the memories' lists: docs/architecture.md (Speculation and coverage).

While a live batch runs, every change to the item prior is recorded in an undo log
(:meth:`ItemPrior.begin`), so a batch run again after an infrastructure error counts its
requests once (:mod:`streams.engine.undo`); the pair memory needs none (a table value, saved
only once the batch is delivered) and recognises a redelivered request by its id. Only the
speculate step reads and writes either: it attaches each proposal's raw inputs (item prior
count, pair count) to the proposals as of the request, so the verify step ranks from the
message alone, in any thread and however far the requests agent has run ahead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streams.engine.undo import UndoLog
from streams.engine.window_counts import BUCKET_MS, WindowCounts

#: candidate lists counted per request (the user's newest up to the request)
LISTS_PER_USER = 4
#: lists stored beyond those: a redelivered tail of up to this many requests per user (a
#: worker that died after saving its tables, before committing its offsets) still finds the
#: older lists it counted the first time (~4.5 kB per user with 50 candidates each)
REDELIVERY_SLACK = 2
#: the rankings that read the pair memory (the others never load or store it)
PAIR_RANKINGS = ("recurrence", "pair")
#: the rankings that read the item prior
PRIOR_RANKINGS = ("recurrence", "prior", "vm_x_prior")


#: the item prior counts lists in event-time buckets of this length (its window moves a bucket
#: at a time, so the counts are integers that no processing order can change)
PRIOR_BUCKET_MS = BUCKET_MS


class ItemPrior:
    """How many of the users' remembered candidate lists of the last ``window_ms`` hold each
    item: a view of table state, kept up to date as the pair memories change.

    The lists are exactly those the users' pair memories hold (the ``recent`` table), so a
    restarted or rebalanced worker rebuilds the same counts from that table
    (:meth:`rebuild`) that an uninterrupted one holds (:mod:`streams.engine.window_counts`:
    integers over whole buckets of :data:`PRIOR_BUCKET_MS`). Until 2026-12-07 the prior was a
    float decayed count of every list the process had seen, which a new process could not
    rebuild.
    """

    def __init__(self, window_ms: int, bucket_ms: int = PRIOR_BUCKET_MS) -> None:
        self.window = WindowCounts(window_ms, bucket_ms)

    @property
    def undo(self) -> UndoLog | None:
        """The log recording changes now (None: none)."""
        return self.window.undo

    def begin(self, undo: UndoLog) -> None:
        """Record every change in ``undo`` until :meth:`end` (one live batch)."""
        self.window.undo = undo

    def end(self) -> None:
        """Stop recording (after the batch's commit or rollback)."""
        self.window.undo = None

    def replace(self, before: PairMemory, after: PairMemory) -> None:
        """Follow one user's pair memory from ``before`` to ``after``: count the lists it
        gained, uncount the ones it dropped (a redelivered request changes neither)."""
        if before is after:  # a redelivery: ``remember`` returned the memory unchanged
            return
        kept = {k.request_id for k in after.lists}
        had = {k.request_id for k in before.lists}
        for listed in after.lists:
            if listed.request_id not in had:
                self.window.add(listed.seen_at_ms, listed.items.tolist())
        for listed in before.lists:
            if listed.request_id not in kept:
                self.window.add(listed.seen_at_ms, listed.items.tolist(), -1)

    def rebuild(self, memories: Iterable[PairMemory]) -> None:
        """Start again from the pair memories (a worker's ``recent`` table after a restart or
        a rebalance): the counts an uninterrupted run over the same lists holds."""
        self.window.clear()
        for memory in memories:
            for listed in memory.lists:
                self.window.add(listed.seen_at_ms, listed.items.tolist())

    def raw_counts(self, item_ids: Sequence[int]) -> np.ndarray:
        """Lists in the window that hold each item, float64 ``[n]`` (not normalised)."""
        return self.window.values(item_ids, len(item_ids))

    def scores(self, item_ids: Sequence[int]) -> np.ndarray:
        """Relative item-prior scores in [0, 1], float64 ``[n]`` (max = 1 within the call)."""
        return normalised(self.raw_counts(item_ids))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ItemPrior) and self.window == other.window

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class RecentList:
    """One remembered candidate list: the request's id, its event time, and its candidates
    sorted and unique (so :meth:`PairMemory.pair_counts` counts memberships with one sort and
    two binary searches instead of one ``np.isin`` per list)."""

    request_id: str
    seen_at_ms: int
    items: np.ndarray

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RecentList)
            and (self.request_id, self.seen_at_ms) == (other.request_id, other.seen_at_ms)
            and np.array_equal(self.items, other.items)
        )

    __hash__ = None  # type: ignore[assignment]  # holds an array


@dataclass(frozen=True, slots=True)
class PairMemory:
    """One user's last :data:`LISTS_PER_USER` + :data:`REDELIVERY_SLACK` candidate lists,
    oldest first (immutable: the step returns a new value, the driver stores it)."""

    lists: tuple[RecentList, ...] = ()

    @property
    def newest_ms(self) -> int | None:
        """Event time of the newest list (None: nothing remembered)."""
        return self.lists[-1].seen_at_ms if self.lists else None

    def remember(self, request_id: str, item_ids: Sequence[int], event_time_ms: int) -> PairMemory:
        """The memory with this request's list added (the oldest dropped past the lists
        kept); unchanged for a request already remembered (a redelivery)."""
        if any(kept.request_id == request_id for kept in self.lists):
            return self
        listed = RecentList(request_id, event_time_ms, np.unique(np.asarray(item_ids, np.int64)))
        return PairMemory((*self.lists, listed)[-(LISTS_PER_USER + REDELIVERY_SLACK) :])

    def pair_counts(
        self, item_ids: Sequence[int], event_time_ms: int, memory_ms: int
    ) -> np.ndarray:
        """In how many of the user's newest :data:`LISTS_PER_USER` lists of the last
        ``memory_ms`` (up to ``event_time_ms``, inclusive: a later list, already stored when a
        request is redelivered, does not count) each item appeared, float64 ``[n]``."""
        items = np.asarray(item_ids, np.int64)
        recent = [
            kept.items for kept in self.lists if 0 <= event_time_ms - kept.seen_at_ms <= memory_ms
        ][-LISTS_PER_USER:]
        if not recent:
            return np.zeros(items.shape[0], np.float64)
        # each list is unique, so an item's occurrences in them all = the lists that hold it
        merged = recent[0] if len(recent) == 1 else np.sort(np.concatenate(recent))
        hits = np.searchsorted(merged, items, "right") - np.searchsorted(merged, items, "left")
        return hits.astype(np.float64)

    def to_json(self) -> list[list[Any]]:
        """The table value: ``[[request id, event time, [items]], ...]``, oldest first."""
        return [[k.request_id, k.seen_at_ms, k.items.tolist()] for k in self.lists]

    @classmethod
    def from_json(cls, value: Any) -> PairMemory:
        """Decode a table value (None: a user never seen)."""
        if not value:
            return EMPTY_MEMORY
        return cls(tuple(RecentList(str(r), int(t), np.asarray(i, np.int64)) for r, t, i in value))


EMPTY_MEMORY = PairMemory()


@dataclass(frozen=True, slots=True)
class RecurrenceInputs:
    """One request's recurrence inputs, aligned with its proposals: the item prior's
    counts and the pair counts (float64 ``[n]`` each), as of the request."""

    prior_counts: np.ndarray
    pair_counts: np.ndarray

    @classmethod
    def none(cls, n: int) -> RecurrenceInputs:
        """Nothing recurred (a message without inputs): ranking falls back to the VM score."""
        return cls(np.zeros(n, np.float64), np.zeros(n, np.float64))

    @classmethod
    def of(cls, prior_counts: Sequence[float], pair_counts: Sequence[int]) -> RecurrenceInputs:
        return cls(np.asarray(prior_counts, np.float64), np.asarray(pair_counts, np.float64))


def normalised(raw: np.ndarray) -> np.ndarray:
    """Relative scores in [0, 1] (max = 1 within ``raw``; all zeros stay zeros)."""
    top = raw.max() if raw.size else 0.0
    return raw / top if top > 0 else raw


def recurrence_key(
    rank_by: str, vm_scores: np.ndarray, prior_counts: np.ndarray, pair_counts: np.ndarray
) -> np.ndarray:
    """The verifier's ranking key of one request's pairs from the recurrence inputs the
    speculate step attached (:func:`streams.engine.steps.speculate.speculate`): the VM score
    only breaks ties between equally recurrent items, except in ``vm_x_prior``. ``pair`` has
    no item prior (its ``prior_counts`` are zeros)."""
    prior: np.ndarray = normalised(prior_counts)
    if rank_by in PAIR_RANKINGS:
        prior = pair_counts + prior
    key: np.ndarray = prior * vm_scores if rank_by == "vm_x_prior" else prior + 1e-6 * vm_scores
    return key
