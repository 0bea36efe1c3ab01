"""Recurrence scores: which of a request's candidates will be asked for again soon.

The VM scores *relevance*; which pairs come back depends on the retrieval that builds candidate
lists. Two cheap signals, both known at speculation time:

* the **item prior**: decayed frequency of the item in recent candidate lists (items retrieval
  keeps returning to everybody — trending, popular);
* the **pair memory**: in how many of *this user's* last few candidate lists the item already
  appeared (items retrieval keeps returning to this user).

Measured with ``solaris simulate --sweep`` (4 h TTL, exact coverage over all candidates at a 10 %
per-request budget; random selection / the VM's relevance ranking / this score / a verifier that
knows the future): ml-latest-small 0.220 / 0.207 / 0.282 / 0.341, Taobao 0.035 / 0.033 / 0.048 /
0.055. At a 50 % budget the gaps narrow (random already gets ~90 % of the ceiling on MovieLens).

State is per process: in the live pipeline each worker counts the requests of its own partitions
(a user's requests all reach one worker) and re-warms after a restart. While a live batch runs,
every change is recorded in an undo log (:meth:`RecurrencePrior.begin`), so a batch run again
after an infrastructure error counts its requests once (:mod:`streams.engine.undo`). Only the speculate step
reads and writes it: it attaches each proposal's raw inputs (item prior count, pair count) to the
proposals as of the request, so the verify step ranks from the message alone, in any thread and
however far the requests agent has run ahead (before, the verify step read this object in the
model thread while the event loop wrote it, and its ranking depended on how many later requests
had been counted).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streams.engine.lookahead import DecayedCounter
from streams.engine.undo import UndoLog

_SWEEP_EVERY = 10_000  # observed requests between sweeps of idle users


class RecurrencePrior:
    """Item prior (decayed frequency in candidate lists) plus each user's recent candidate lists."""

    def __init__(
        self,
        half_life_ms: int = 6 * 3_600_000,
        lists_per_user: int = 4,
        memory_ms: int = 4 * 3_600_000,
        max_users: int = 200_000,
    ) -> None:
        self._counts = DecayedCounter(half_life_ms)
        self.lists_per_user = lists_per_user
        self.memory_ms = memory_ms
        #: bounds memory (~3 kB per user with 4 lists of 50 candidates)
        self.max_users = max_users
        self._lists: dict[int, deque[tuple[int, np.ndarray]]] = {}
        self._observed = 0
        self._undo: UndoLog | None = None

    def begin(self, undo: UndoLog) -> None:
        """Record every change in ``undo`` until :meth:`end` (one live batch)."""
        self._undo = self._counts.undo = undo
        undo.attribute(self, "_observed")

    def end(self) -> None:
        """Stop recording (after the batch's commit or rollback)."""
        self._undo = self._counts.undo = None

    def _touch(self, user_id: int) -> None:
        if self._undo is not None:
            self._undo.entry(self._lists, user_id, copy=_copy_lists)

    def observe(
        self, item_ids: Sequence[int], event_time_ms: int, user_id: int | None = None
    ) -> None:
        """Count one request's candidate list (call before verifying that request)."""
        self._counts.add_many(item_ids, event_time_ms)
        if user_id is None:
            return
        self._observed += 1
        if self._observed % _SWEEP_EVERY == 0:  # users idle past the memory count for nothing
            self._drop_idle(event_time_ms)
        self._touch(user_id)
        lists = self._lists.get(user_id)
        if lists is None:
            if len(self._lists) >= self.max_users:
                self._evict(event_time_ms)
            lists = self._lists[user_id] = deque(maxlen=self.lists_per_user)
        # sorted and unique: pair_counts then counts memberships with one sort and two binary
        # searches instead of one np.isin per list (13.7 % of the live event loop at 400/s)
        lists.append((event_time_ms, np.unique(np.asarray(item_ids, np.int64))))

    def _drop_idle(self, now_ms: int) -> int:
        stale = [u for u, q in self._lists.items() if now_ms - q[-1][0] > self.memory_ms]
        for u in stale:
            self._touch(u)
            del self._lists[u]
        return len(stale)

    def _evict(self, now_ms: int) -> None:
        """Full: drop users idle past the memory; if that frees little, the oldest half."""
        if self._drop_idle(now_ms) < len(self._lists) // 10:
            by_age = sorted(self._lists, key=lambda u: self._lists[u][-1][0])
            for u in by_age[: len(by_age) // 2]:
                self._touch(u)
                del self._lists[u]

    def tracked_users(self) -> int:
        """Users whose recent candidate lists are held (for tests and metrics)."""
        return len(self._lists)

    def raw_counts(self, item_ids: Sequence[int]) -> np.ndarray:
        """The item prior's decayed count of each item, float64 ``[n]`` (not normalised)."""
        return np.array([self._counts.value(int(i)) for i in item_ids], np.float64)

    def scores(self, item_ids: Sequence[int]) -> np.ndarray:
        """Relative item-prior scores in [0, 1], float64 ``[n]`` (max = 1 within the call)."""
        return normalised(self.raw_counts(item_ids))

    def pair_counts(self, user_id: int, item_ids: Sequence[int], event_time_ms: int) -> np.ndarray:
        """In how many of the user's candidate lists of the last ``memory_ms`` (up to
        ``event_time_ms``, inclusive) each item appeared, float64 ``[n]``."""
        items = np.asarray(item_ids, np.int64)
        recent = [
            listed
            for t, listed in self._lists.get(user_id, ())
            if 0 <= event_time_ms - t <= self.memory_ms
        ]
        if not recent:
            return np.zeros(items.shape[0], np.float64)
        # each list is unique, so an item's occurrences in them all = the lists that hold it
        merged = recent[0] if len(recent) == 1 else np.sort(np.concatenate(recent))
        hits = np.searchsorted(merged, items, "right") - np.searchsorted(merged, items, "left")
        return hits.astype(np.float64)

    def recurrence(self, user_id: int, item_ids: Sequence[int], event_time_ms: int) -> np.ndarray:
        """Pair memory + item prior: the user's own recurrence first, the prior breaks ties."""
        total: np.ndarray = self.pair_counts(user_id, item_ids, event_time_ms) + self.scores(
            item_ids
        )
        return total


def _copy_lists(lists: deque[tuple[int, np.ndarray]]) -> deque[tuple[int, np.ndarray]]:
    return deque(lists, maxlen=lists.maxlen)  # the arrays in it are never changed in place


@dataclass(frozen=True, slots=True)
class RecurrenceInputs:
    """One request's recurrence inputs, aligned with its proposals: the item prior's decayed
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
    only breaks ties between equally recurrent items, except in ``vm_x_prior``."""
    prior: np.ndarray = normalised(prior_counts)
    if rank_by == "recurrence":
        prior = pair_counts + prior
    key: np.ndarray = prior * vm_scores if rank_by == "vm_x_prior" else prior + 1e-6 * vm_scores
    return key
