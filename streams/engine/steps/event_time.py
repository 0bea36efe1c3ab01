"""Event-time admission: an event dated far ahead of the partition's clock is refused.

One request dated in the future used to set that user's aggregate time ahead of every later
request (the aggregate was never served again) and stall the neighbour refresh clock. Rule: an
event more than ``max_future_ms`` ahead of ``max(partition high-water mark, wall clock)`` is
refused (dead letter ``future_event_time``). The wall clock matters only for replays of old
traffic (event times far behind it), where a legitimate gap in the log — a night, a weekend —
must not look like a future event; live, the high-water mark follows the wall clock.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

FUTURE_EVENT_TIME = "future_event_time"


@dataclass(slots=True)
class EventClock:
    """Per partition (any key: the live driver uses (topic, partition)): the newest accepted
    event time. The driver keeps one per process."""

    max_future_ms: int
    high_water_ms: dict[Hashable, int] = field(default_factory=dict)

    def admit(self, partition: Hashable, event_time_ms: int, wall_ms: int) -> bool:
        """True (and the mark advanced) when ``event_time_ms`` is not too far ahead."""
        mark = self.high_water_ms.get(partition)
        limit = wall_ms if mark is None else max(mark, wall_ms)
        if event_time_ms > limit + self.max_future_ms:
            return False
        self.high_water_ms[partition] = event_time_ms if mark is None else max(mark, event_time_ms)
        return True
