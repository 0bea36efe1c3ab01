"""Which pairs of a user were sent to the FM recently, so speculation wastes no FM work.

Per user a map ``item_id -> event time of the request that last verified it`` (the *mark*);
entries older than the pair TTL are pruned on write. A pair is *fresh enough* when it was
verified less than ``refresh_after_ms`` ago (event time): re-embedding earlier buys nothing,
later extends its coverage window.

A mark is made when the pair is verified, before its vector exists (issue 24: a pair shed or
dead-lettered by the FM worker, or lost in an FM failure, would otherwise not be proposed again
for ``refresh_after_ms``). So a mark older than ``in_flight_ms`` holds only if the pair's vector
came back: its ``(item, mark)`` is among the user's *confirmed* embeddings (the aggregate
state's record of the embeddings it folded, :attr:`AggregateState.seen`, read from the same
``embeddings`` topic in both drivers). Younger marks hold either way: the vector may be on its
way.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable

#: a user's confirmed embeddings ``{(item_id, event_time_ms)}``, loaded only when a rule needs it
Confirmed = Callable[[], Container[tuple[int, int]]]


def is_fresh(
    ledger: dict[int, int],
    item_id: int,
    event_time_ms: int,
    refresh_after_ms: int,
    in_flight_ms: int | None = None,
    confirmed: Confirmed | None = None,
) -> bool:
    """True when ``item_id`` was verified for this user within ``refresh_after_ms`` before now
    and, with ``in_flight_ms``, either less than ``in_flight_ms`` ago or its vector came back
    (``confirmed``; called only for a mark past ``in_flight_ms``)."""
    t = ledger.get(item_id)
    if t is None or not 0 <= event_time_ms - t < refresh_after_ms:
        return False
    if in_flight_ms is None or event_time_ms - t < in_flight_ms:
        return True
    if confirmed is None:
        raise ValueError("an in-flight timeout needs the user's confirmed embeddings")
    return (item_id, t) in confirmed()


def record(
    ledger: dict[int, int], item_ids: Iterable[int], event_time_ms: int, ttl_ms: int
) -> dict[int, int]:
    """Record embeddings at ``event_time_ms`` and prune entries older than ``ttl_ms``. Mutates."""
    for item in item_ids:
        if ledger.get(item, -1) < event_time_ms:
            ledger[item] = event_time_ms
    horizon = event_time_ms - ttl_ms
    for item in [i for i, t in ledger.items() if t < horizon]:
        del ledger[item]
    return ledger
