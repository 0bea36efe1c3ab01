"""Integer counts over a window of event-time buckets: the shape of every speculate-side count
that must come back from the tables after a restart.

The item prior (:class:`streams.engine.recurrence.ItemPrior`) and the look-ahead's trending
counts (:class:`streams.engine.lookahead.Lookahead`) count what the users' stored state holds
(their pair memories, their histories), so a worker rebuilds them from its tables. For the
rebuilt counts to equal the followed ones whatever order the values are read in, they are
integers (no float sum whose rounding depends on the order) over whole buckets: the window holds
the newest bucket anything was added to and the ones before it, up to ``window_ms``; a bucket
that leaves it is uncounted at once, and anything older is never counted.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Iterable, Sequence
from itertools import repeat

import numpy as np

from streams.engine.undo import UndoLog

#: the default bucket: the window moves ten minutes of event time at a time
BUCKET_MS = 10 * 60_000


class WindowCounts:
    """``key -> weight`` summed over the buckets of the window (see the module)."""

    def __init__(self, window_ms: int, bucket_ms: int = BUCKET_MS) -> None:
        if window_ms <= 0 or bucket_ms <= 0:
            raise ValueError(f"window_ms and bucket_ms must be positive ({window_ms}, {bucket_ms})")
        self.bucket_ms = bucket_ms
        self.window_buckets = -(-window_ms // bucket_ms)
        self._counts: dict[int, int] = {}  #: key -> its weight in the window
        #: bucket -> what was added there, ``(keys, weight)`` (taken back again on expiry)
        self._buckets: dict[int, list[tuple[Sequence[int], int]]] = {}
        self._newest: int | None = None  #: the newest bucket anything was added to
        #: records every change while a batch runs (:mod:`streams.engine.undo`); None = off
        self.undo: UndoLog | None = None

    def clear(self) -> None:
        """Nothing counted (before a rebuild; not recorded in the undo log)."""
        self._counts, self._buckets, self._newest = {}, {}, None

    def add(self, event_time_ms: int, keys: Sequence[int], weight: int = 1) -> None:
        """Add ``weight`` to each of ``keys`` (each at most once) at ``event_time_ms``; a
        negative weight takes back what an earlier add counted (nothing once its bucket left
        the window)."""
        bucket = event_time_ms // self.bucket_ms
        added = self._buckets.get(bucket)
        if added is None:
            if weight < 0:
                return  # its bucket left the window: already uncounted
            if self._newest is not None and bucket <= self._newest - self.window_buckets:
                return  # older than the window
            if self.undo is not None:
                self.undo.entry(self._buckets, bucket)  # absent before
            added = self._buckets[bucket] = []
        self._apply(keys, weight)
        added.append((keys, weight))
        if self.undo is not None:
            self.undo.call(added.pop)
        if self._newest is None or bucket > self._newest:
            if self.undo is not None:
                self.undo.attribute(self, "_newest")
            self._newest = bucket
            self._expire(bucket - self.window_buckets)

    def _apply(self, keys: Sequence[int], weight: int) -> None:
        """:meth:`_change`, recorded as its own inverse (which restores the dict exactly:
        counts are integers, and a count back at 0 is deleted)."""
        self._change(keys, weight)
        if self.undo is not None:
            self.undo.call(self._change, keys, -weight)

    def _change(self, keys: Sequence[int], weight: int) -> None:
        """Add ``weight`` to the count of each of ``keys`` (distinct)."""
        counts = self._counts
        totals = list(map(operator.add, map(counts.get, keys, repeat(0)), repeat(weight)))
        counts.update(zip(keys, totals, strict=True))  # C-level passes: it runs per request
        if 0 in totals:
            for key, total in zip(keys, totals, strict=True):
                if not total:
                    del counts[key]

    def _expire(self, last: int) -> None:
        """Uncount every bucket up to ``last`` (it left the window)."""
        for bucket in [b for b in self._buckets if b <= last]:
            if self.undo is not None:  # the list itself: it is not changed once out of the window
                self.undo.entry(self._buckets, bucket)
            for keys, weight in self._buckets.pop(bucket):
                self._apply(keys, -weight)

    def values(self, keys: Iterable[int], n: int) -> np.ndarray:
        """The count of each of the ``n`` ``keys``, float64 ``[n]``."""
        # a NumPy integer key finds the same entry: it hashes and compares as the Python int
        return np.fromiter(map(self._counts.get, keys, repeat(0)), np.float64, n)

    def top(self, n: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """The ``n`` keys with the largest counts, not in ``exclude``; ties go to the smaller
        key (so a rebuilt instance answers as the followed one does)."""
        best = heapq.nsmallest(
            n + len(exclude), self._counts.items(), key=lambda kv: (-kv[1], kv[0])
        )
        return [k for k, _ in best if k not in exclude][:n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WindowCounts) and (self._counts, self._newest) == (
            other._counts,
            other._newest,
        )

    __hash__ = None  # type: ignore[assignment]
