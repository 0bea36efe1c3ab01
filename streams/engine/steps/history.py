"""History step: an impression extends the user's interaction list (the FM's input), and the
look-ahead counts (a view of the histories) follow the change."""

from __future__ import annotations

from schemas.records import ImpressionEvent
from streams.engine.history import Entry, add_interaction
from streams.engine.lookahead import Lookahead

#: how many of the user's latest engaged items seed speculation and look-ahead
RECENT_POSITIVES = 5


def recent_positive_items(entries: list[Entry]) -> list[int]:
    """The user's last :data:`RECENT_POSITIVES` engaged items, oldest first."""
    return [item for item, label, _ in entries if label][-RECENT_POSITIVES:]


def observe_impression(
    entries: list[Entry], imp: ImpressionEvent, capacity: int, lookahead: Lookahead | None
) -> list[Entry]:
    """Add ``imp`` to ``entries`` (mutated and returned; idempotent on redelivery); the
    look-ahead counts follow the history's change (they count what the histories hold)."""
    if lookahead is None:
        return add_interaction(entries, imp.item_id, imp.label, imp.event_time_ms, capacity)
    before = list(entries)
    add_interaction(entries, imp.item_id, imp.label, imp.event_time_ms, capacity)
    lookahead.replace(before, entries)
    return entries
