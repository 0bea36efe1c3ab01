"""Per-user recent interactions in event time: the FM's input.

State per user is a list of ``(item_id, label, event_time_ms)`` kept sorted by event time and
capped, so it can live in a Faust table (JSON) or in a dict (simulator) alike. Reading cuts the
history *strictly before* an event time, so an embedding computed late (after later impressions
arrived) still sees exactly what was known when its request happened.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from models.history import UserHistory

Entry = tuple[int, int, int]  # (item_id, label, event_time_ms)
__all__ = ["Entry", "HistoryBook", "UserHistory", "add_interaction", "history_before"]


def add_interaction(
    entries: list[Entry], item_id: int, label: int, event_time_ms: int, capacity: int
) -> list[Entry]:
    """Insert in event-time order (ties keep arrival order) and keep the newest ``capacity``.

    Idempotent for an exact duplicate entry, so an at-least-once redelivery changes nothing.
    Mutates and returns ``entries``.
    """
    entry = (item_id, label, event_time_ms)
    pos = bisect.bisect_right([e[2] for e in entries], event_time_ms)
    lo = bisect.bisect_left([e[2] for e in entries], event_time_ms)
    if entry in entries[lo:pos]:
        return entries
    entries.insert(pos, entry)
    if len(entries) > capacity:
        del entries[: len(entries) - capacity]
    return entries


def history_before(
    entries: Sequence[Sequence[int]], event_time_ms: int, length: int
) -> UserHistory:
    """The last ``length`` entries with event time strictly before ``event_time_ms``."""
    cut = bisect.bisect_left([e[2] for e in entries], event_time_ms)
    window = entries[max(0, cut - length) : cut]
    if not window:
        return UserHistory.empty()
    arr = np.asarray(window, dtype=np.int64)
    return UserHistory(arr[:, 0].copy(), arr[:, 1].astype(np.int8), arr[:, 2].copy())


class HistoryBook:
    """In-process map ``user -> entries`` for the simulator (Faust keeps the same lists in a table)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._by_user: dict[int, list[Entry]] = {}

    def add(self, user_id: int, item_id: int, label: int, event_time_ms: int) -> None:
        entries = self._by_user.setdefault(user_id, [])
        add_interaction(entries, item_id, label, event_time_ms, self.capacity)

    def before(self, user_id: int, event_time_ms: int, length: int) -> UserHistory:
        return history_before(self._by_user.get(user_id, []), event_time_ms, length)

    def entries(self, user_id: int) -> list[Entry]:
        return self._by_user.get(user_id, [])

    def mutable(self, user_id: int) -> list[Entry]:
        """The user's list itself (created empty), for steps that update it in place."""
        return self._by_user.setdefault(user_id, [])

    def users(self) -> list[int]:
        return list(self._by_user)
