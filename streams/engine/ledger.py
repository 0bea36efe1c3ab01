"""Which pairs of a user were sent to the FM recently, so speculation wastes no FM work.

Per user a map ``item_id -> event time of its last embedding``; entries older than the pair TTL
are pruned on write. A pair is *fresh enough* when it was embedded less than ``refresh_after_ms``
ago (event time): re-embedding earlier buys nothing, later extends its coverage window.
"""

from __future__ import annotations

from collections.abc import Iterable


def is_fresh(
    ledger: dict[int, int], item_id: int, event_time_ms: int, refresh_after_ms: int
) -> bool:
    """True when ``item_id`` was embedded for this user within ``refresh_after_ms`` before now."""
    t = ledger.get(item_id)
    return t is not None and 0 <= event_time_ms - t < refresh_after_ms


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
