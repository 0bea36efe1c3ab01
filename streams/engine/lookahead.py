"""Look-ahead sources for speculation: item co-visitation and trending items, in event time.

Both count what the users' histories hold (:class:`Lookahead`), so a restarted or rebalanced
worker rebuilds them from its ``history`` table. In the live pipeline each worker counts the
histories of its own partitions' users: an approximation of the global counts that needs no
shuffle.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence

from streams.engine.undo import UndoLog
from streams.engine.window_counts import WindowCounts

#: how many of the user's engaged items before an engagement count as co-visited with it
PARTNERS = 5

Entry = tuple[int, int, int]  #: a history entry (item, label, event time), as the history holds


def covisited_pairs(entries: Sequence[Entry], window_ms: int) -> Counter[tuple[int, int]]:
    """The co-visits one user's history holds (time-sorted ``entries``): each engaged entry with
    each of the :data:`PARTNERS` engaged entries before it that are at most ``window_ms``
    older and of another item, both ways round."""
    pairs: Counter[tuple[int, int]] = Counter()
    before: list[tuple[int, int]] = []  # the engaged (item, time) so far, newest last
    for item, label, t in entries:
        if not label:
            continue
        for other, seen in before[-PARTNERS:]:
            if other != item and t - seen <= window_ms:
                pairs[(other, item)] += 1
                pairs[(item, other)] += 1
        before.append((item, t))
    return pairs


class CoVisitation:
    """Item -> items engaged by the same user within ``window_ms``: the co-visits the users'
    histories hold (:func:`covisited_pairs`), as integer counts."""

    def __init__(self, window_ms: int = 3_600_000) -> None:
        self.window_ms = window_ms
        self._pairs: dict[int, dict[int, int]] = {}
        #: records every change while a batch runs (:mod:`streams.engine.undo`); None = off
        self.undo: UndoLog | None = None

    def add(self, pairs: Counter[tuple[int, int]], sign: int) -> None:
        """Count (``sign`` 1) or uncount (-1) ``pairs``."""
        undo, rows = self.undo, self._pairs
        for (a, b), n in pairs.items():
            row = rows.get(a)
            if row is None:
                if undo is not None:
                    undo.entry(rows, a)
                row = rows[a] = {}
            if undo is not None:
                undo.entry(row, b)
            row[b] = left = row.get(b, 0) + sign * n
            if not left:
                del row[b]
                if not row:
                    if undo is not None:
                        undo.entry(rows, a)
                    del rows[a]

    def neighbours(self, item_id: int, n: int) -> list[int]:
        """The ``n`` items most often co-visited with ``item_id`` (ties: the smaller id)."""
        row = self._pairs.get(item_id)
        if not row:
            return []
        return [k for k, _ in heapq.nsmallest(n, row.items(), key=lambda kv: (-kv[1], kv[0]))]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CoVisitation) and self._pairs == other._pairs

    __hash__ = None  # type: ignore[assignment]


class Lookahead:
    """Co-visitation neighbours of what the user just engaged with, then trending items: both a
    view of the users' histories (the ``history`` table), followed as each history changes
    (:meth:`replace`) and rebuilt from the table after a restart or a rebalance
    (:meth:`rebuild`) to the same integer counts.

    Trending counts each history entry of the last ``trending_window_ms`` (whole buckets,
    :mod:`streams.engine.window_counts`), an engaged one twice. Until 2026-12-07 both were
    counts of every impression the process had seen (trending decayed with a 1 h half-life,
    co-visitation lists pruned to the 50 largest), which a new process started from nothing.
    """

    def __init__(
        self, covisit_window_ms: int = 3_600_000, trending_window_ms: int = 3_600_000
    ) -> None:
        self.covisit = CoVisitation(covisit_window_ms)
        self.trending = WindowCounts(trending_window_ms)

    @property
    def undo(self) -> UndoLog | None:
        """The log recording changes now (None: none)."""
        return self.trending.undo

    def begin(self, undo: UndoLog) -> None:
        """Record every change in ``undo`` until :meth:`end` (one live batch)."""
        self.covisit.undo = self.trending.undo = undo

    def end(self) -> None:
        self.covisit.undo = self.trending.undo = None

    def replace(self, before: Sequence[Entry], after: Sequence[Entry]) -> None:
        """Follow one user's history from ``before`` to ``after`` (a redelivery: unchanged)."""
        if before == after:
            return
        gone, new = Counter(before), Counter(after)
        for (item, label, t), n in (new - gone).items():
            self.trending.add(t, [item], n * (1 + label))
        for (item, label, t), n in (gone - new).items():
            self.trending.add(t, [item], -n * (1 + label))
        window = self.covisit.window_ms
        old_pairs, new_pairs = covisited_pairs(before, window), covisited_pairs(after, window)
        self.covisit.add(new_pairs - old_pairs, 1)
        self.covisit.add(old_pairs - new_pairs, -1)

    def rebuild(self, histories: Iterable[Sequence[Entry]]) -> None:
        """Start again from the users' histories (in any order): the counts that following
        them holds."""
        self.trending.clear()
        self.covisit = CoVisitation(self.covisit.window_ms)
        for entries in histories:
            self.replace((), entries)

    def propose(self, recent_positive_items: list[int], n: int, exclude: set[int]) -> list[int]:
        """Up to ``n`` items: co-visited with the newest engagements first, then trending."""
        out: list[int] = []
        seen = set(exclude)
        for item in reversed(recent_positive_items):
            for nb in self.covisit.neighbours(item, n):
                if nb not in seen:
                    out.append(nb)
                    seen.add(nb)
                if len(out) >= n:
                    return out
        out.extend(self.trending.top(n - len(out), seen))
        return out

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Lookahead)
            and self.covisit == other.covisit
            and self.trending == other.trending
        )

    __hash__ = None  # type: ignore[assignment]
