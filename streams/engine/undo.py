"""Undo log of in-process stage state over one batch, so a batch run again starts from the
same state (issue 24).

The live agents run a batch again, whole, after an infrastructure error (a failed delivery, a
store outage: :mod:`streams.live.agents.batch_guard`). Table state is only written once the
batch's outputs are delivered, so a rerun reads it unchanged; but the speculate step also feeds
state held in the process (the item prior, the user representations), which the failed try
had already changed. Without an undo, the rerun counted every request of the batch twice: the
item prior's counts, the user's recent candidate lists (process state too until 2026-12-06, a
table since) and the representation's moving average all differed from the simulator's, and
with them the verify step's ranking.

The log records a value the first time a batch changes it (and a whole attribute before a
structure is rebuilt) and restores them newest first, so nested changes unwind in order. It is
pure bookkeeping: no clock, no I/O.
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


class UndoLog:
    """First-touch records of dict entries and attributes; :meth:`rollback` restores them."""

    def __init__(self) -> None:
        self._records: list[tuple[Any, Any, Any, bool]] = []
        self._touched: set[tuple[int, Any]] = set()

    def __len__(self) -> int:
        return len(self._records)

    def entry(self, mapping: dict[Any, Any], key: Any, copy: Any = None) -> None:
        """Remember ``mapping[key]`` (or its absence) before its first change in this batch;
        ``copy`` copies a value that is changed in place (e.g. a deque)."""
        mark = (id(mapping), key)
        if mark in self._touched:
            return
        self._touched.add(mark)
        old = mapping.get(key, _MISSING)
        if copy is not None and old is not _MISSING:
            old = copy(old)
        self._records.append((mapping, key, old, False))

    def attribute(self, owner: object, name: str) -> None:
        """Remember ``owner.name`` before it is replaced (e.g. a dict rebuilt by a prune)."""
        self._records.append((owner, name, getattr(owner, name), True))

    def rollback(self) -> None:
        """Restore every recorded value, newest record first; the log is then empty."""
        for target, key, old, is_attribute in reversed(self._records):
            if is_attribute:
                setattr(target, key, old)
            elif old is _MISSING:
                target.pop(key, None)
            else:
                target[key] = old
        self.clear()

    def clear(self) -> None:
        """Forget the records (the batch's changes stay)."""
        self._records.clear()
        self._touched.clear()
