"""The simulator's scheduling hook: pipeline work applied late in event time.

The lockstep simulator runs an event's pipeline work (a request's speculate → verify → embed →
write, an impression's history update) at the event itself, so the next read sees it. A live
pipeline is late: a request's pairs land L seconds after it. :class:`Simulator` takes a
:class:`DelaySchedule` and queues each event's work in a :class:`DelayedPipeline` until its due
time; the ranker's reads stay on time. A user's work keeps its order (as in one Kafka
partition), so a shorter delay never overtakes a longer one. Used by the demo to compare a live
run with the simulator at the latency that run had (``streams.app.demo_offline``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from schemas.records import ImpressionEvent, RequestEvent

Event = RequestEvent | ImpressionEvent


class DelaySchedule(Protocol):
    """How late (event time, ms) the pipeline applies an event's work after the event."""

    def request_ms(self, r: RequestEvent) -> int: ...

    def impression_ms(self, imp: ImpressionEvent) -> int: ...


@dataclass(frozen=True, slots=True)
class ConstantDelay:
    """Every event's pipeline work ``delay_ms`` late."""

    delay_ms: int

    def request_ms(self, r: RequestEvent) -> int:
        return self.delay_ms

    def impression_ms(self, imp: ImpressionEvent) -> int:
        return self.delay_ms


@dataclass(slots=True)
class DelayedPipeline:
    """Events waiting for their due time, in finishing order (ties in event order)."""

    schedule: DelaySchedule
    _due: list[tuple[int, int, Event]] = field(default_factory=list)
    _seq: int = 0
    #: (is a request, user) -> the latest due time queued: per-user order is kept
    _user_due: dict[tuple[bool, int], int] = field(default_factory=dict)

    def defer(self, event: Event) -> None:
        """Queue ``event``'s work at its due time (never before the user's previous one)."""
        is_request = isinstance(event, RequestEvent)
        delay = (
            self.schedule.request_ms(event)
            if isinstance(event, RequestEvent)
            else self.schedule.impression_ms(event)
        )
        key = (is_request, event.user_id)
        due = max(event.event_time_ms + delay, self._user_due.get(key, 0))
        self._user_due[key] = due
        heapq.heappush(self._due, (due, self._seq, event))
        self._seq += 1

    def run_before(self, t: int, apply: Callable[[Event], None]) -> None:
        """Apply the work due strictly before event time ``t``."""
        while self._due and self._due[0][0] < t:
            _, _, event = heapq.heappop(self._due)
            apply(event)

    def drain(self, apply: Callable[[Event], None]) -> None:
        """Apply everything still queued, in finishing order: the end of the stream, where a
        live pipeline drains its lag (without this the last delay's work was never applied,
        and at zero delay the work of events at the stream's last millisecond was lost)."""
        while self._due:
            _, _, event = heapq.heappop(self._due)
            apply(event)

    def __len__(self) -> int:
        return len(self._due)
