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
structure is rebuilt) and restores them newest first, so nested changes unwind in order. A
:meth:`~UndoLog.savepoint` starts a request inside the batch: :meth:`~UndoLog.rollback_to` undoes
that request alone (the speculate step refuses a request it cannot process without keeping
what it had observed of it). It is pure bookkeeping: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

_MISSING = object()
_ENTRY, _ATTRIBUTE, _ENTRIES, _CALL = 0, 1, 2, 3


class UndoLog:
    """First-touch records of dict entries and attributes; :meth:`rollback` restores them."""

    def __init__(self) -> None:
        #: (target, key or attribute name or keys, old value(s), kind)
        self._records: list[tuple[Any, Any, Any, int]] = []
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
        self._records.append((mapping, key, old, _ENTRY))

    def entries(self, mapping: dict[Any, Any], keys: Sequence[Any]) -> None:
        """Remember ``mapping``'s values (replaced, not changed in place) of ``keys`` before a
        change of each: one record for a request's candidate list. Not deduplicated against
        earlier records (restoring newest first makes repeats harmless), so it costs no
        per-key Python: ~1 µs for 50 keys where one :meth:`entry` each took ~15 µs."""
        keys = tuple(keys)
        self._records.append(
            (mapping, keys, list(map(mapping.get, keys, repeat(_MISSING))), _ENTRIES)
        )

    def attribute(self, owner: object, name: str) -> None:
        """Remember ``owner.name`` before it is replaced (e.g. a dict rebuilt by a prune)."""
        self._records.append((owner, name, getattr(owner, name), _ATTRIBUTE))

    def call(self, undo: Callable[..., Any], *args: Any) -> None:
        """Run ``undo(*args)`` on rollback, in its turn (newest first): the inverse of a
        change no recorded value restores cheaply, e.g. ``list.pop`` after an ``append``."""
        self._records.append((undo, args, None, _CALL))

    def savepoint(self) -> int:
        """Mark the state as of now for :meth:`rollback_to`. Values are then recorded again at
        their next first change (a value first changed before the mark may change after it)."""
        self._touched.clear()
        return len(self._records)

    def rollback_to(self, mark: int) -> None:
        """Restore what changed since ``savepoint()`` returned ``mark``; older records stay, so
        :meth:`rollback` still restores the state before the batch."""
        for target, key, old, kind in reversed(self._records[mark:]):
            if kind == _ATTRIBUTE:
                setattr(target, key, old)
            elif kind == _CALL:
                target(*key)
            elif kind == _ENTRY:
                _restore(target, key, old)
            else:
                for one, value in zip(reversed(key), reversed(old), strict=True):
                    _restore(target, one, value)
        del self._records[mark:]
        self._touched.clear()

    def rollback(self) -> None:
        """Restore every recorded value, newest record first; the log is then empty."""
        self.rollback_to(0)

    def clear(self) -> None:
        """Forget the records (the batch's changes stay)."""
        self._records.clear()
        self._touched.clear()


def _restore(mapping: dict[Any, Any], key: Any, old: Any) -> None:
    if old is _MISSING:
        mapping.pop(key, None)
    else:
        mapping[key] = old
