"""Event-time admission: an event dated far ahead of the wall clock is refused.

One request dated in the future used to set that user's aggregate time ahead of every later
request (the aggregate was never served again) and stall the neighbour refresh clock; an
internal message dated more than an hour ahead makes the broker (Kafka 4:
``log.message.timestamp.after.max.ms``, 1 h) refuse the agent's own output.

Rule: an event more than ``max_future_ms`` ahead of the wall clock is refused (dead letter
``future_event_time``). Why not the partition's event-time high-water mark: live, that mark
follows the wall clock, so the two agree; in a replay of old traffic the mark is far behind
the wall clock and a legitimate gap in the log (a night, a weekend) would look like a future
event; and a mark raised by admitted events ahead of the wall clock would let a chain of them
creep further ahead, each within the bound of the previous one, until the broker refuses one.
The mark is still kept per partition, for the operator (how far behind live a replay is).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

FUTURE_EVENT_TIME = "future_event_time"


@dataclass(slots=True)
class EventClock:
    """Per partition (any key: the live driver uses (topic, partition)): the newest admitted
    event time. The driver keeps one per process."""

    max_future_ms: int
    high_water_ms: dict[Hashable, int] = field(default_factory=dict)

    def admit(self, partition: Hashable, event_time_ms: int, wall_ms: int) -> bool:
        """True (and the partition's mark advanced) when ``event_time_ms`` is at most
        ``max_future_ms`` ahead of ``wall_ms``."""
        if event_time_ms > wall_ms + self.max_future_ms:
            return False
        mark = self.high_water_ms.get(partition)
        self.high_water_ms[partition] = event_time_ms if mark is None else max(mark, event_time_ms)
        return True
