"""Table expiry: when a user's stored state can no longer change any output, so deleting it is
invisible (issue 24, item 5: Faust tables never dropped a user, so a worker's disk and its
recovery from the changelog grew with every user ever seen).

A value is *dead* at event time ``now`` once its newest event is older than its own lifetime
plus a grace:

| table | lifetime | why the value is then equivalent to none |
|---|---|---|
| ``ledger`` | max(pair TTL, refresh-after) | every pair in it is past the pair TTL: no longer fresh, and pruned at the next write anyway |
| ``aggregates`` | the aggregate window | every bucket has left the window: the next embedding evicts them all |
| ``reps`` | the neighbour horizon | the user's next request starts a new representation (:func:`~streams.engine.steps.speculate.observe_representation`) |
| ``recent`` | the pair memory's window (``SOLARIS_VERIFIER_PAIR_MEMORY_MS``) | no list in it counts for a later request (:meth:`~streams.engine.recurrence.PairMemory.pair_counts`) |

The grace (``SOLARIS_TABLE_EXPIRY_GRACE_MS``) covers what the state remembers besides its
content: the ids of the last verified requests, the (item, time) pairs already folded and the
ids of the remembered candidate lists, which recognise a *redelivery*. A redelivery arrives
within the uncommitted window, minutes at most; the grace is a day by default.

Not expired, by design (deleting them would change outputs):
- ``history``: the FM's input is the user's last L interactions however old, so a returning
  user's history is needed. Expiring it needs a history horizon applied alike in the FM's
  training and in both drivers (a change of the FM's input contract).

Pure: no clock, no I/O; the drivers pass event times and decide when to sweep.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streams.engine.aggregator import AggregateState
from streams.engine.config import EngineConfig
from streams.engine.recurrence import PairMemory
from streams.engine.state import ledger_from_table
from streams.engine.steps.speculate import SavedRep
from streams.engine.steps.verify import LedgerState

#: the tables whose values this module can tell dead
EXPIRING_TABLES = ("ledger", "aggregates", "reps", "recent")


def lifetimes(cfg: EngineConfig) -> dict[str, int]:
    """Per expiring table, how long (event time) after its newest event a value can still
    change an output."""
    return {
        "ledger": max(cfg.pair_ttl_ms, cfg.speculator.refresh_after_ms),
        "aggregates": cfg.aggregate_window_ms,
        "reps": cfg.reader.neighbour_aggregate_ttl_ms,
        "recent": cfg.verifier.pair_memory_ms,
    }


def ledger_newest_ms(value: Any) -> int | None:
    """Newest event time in a ledger table value (``{"p": packed pairs, ...}``, or the older
    ``{"pairs": [[item, t]], ...}`` and list-only forms); None when it holds no pair (nothing
    tells its age: kept)."""
    return max(ledger_from_table(value).pairs.values(), default=None)


def aggregates_newest_ms(value: Any) -> int | None:
    """Newest event time folded into an aggregate table value (``{"n": ...}``); None when
    it has folded nothing."""
    if not value or not int(value.get("n", 0)):
        return None
    return int(value["n"])


def reps_newest_ms(value: Any) -> int | None:
    """Event time of the request a saved representation last folded (``[vector, seen_at,
    tag]``); None for no value."""
    return int(value[1]) if value else None


def recent_newest_ms(value: Any) -> int | None:
    """Event time of the newest candidate list in a pair memory value (``[[request id, time,
    items], ...]``); None for no value."""
    return int(value[-1][1]) if value else None


NEWEST = {
    "ledger": ledger_newest_ms,
    "aggregates": aggregates_newest_ms,
    "reps": reps_newest_ms,
    "recent": recent_newest_ms,
}


State = LedgerState | AggregateState | SavedRep | PairMemory


def state_newest_ms(state: State) -> int | None:
    """The same newest event time on a decoded state (the simulator keeps states decoded);
    equal to the table value's by construction of the codecs (unit-tested)."""
    if isinstance(state, LedgerState):
        return max(state.pairs.values(), default=None)
    if isinstance(state, SavedRep):
        return state.seen_at_ms
    if isinstance(state, PairMemory):
        return state.newest_ms
    return state.newest_ms or None


def is_dead(newest_ms: int | None, now_ms: int, lifetime_ms: int, grace_ms: int) -> bool:
    """True when a value whose newest event is ``newest_ms`` can change no output at ``now_ms``
    or later (event times only ever move forward per partition)."""
    return newest_ms is not None and now_ms - newest_ms > lifetime_ms + grace_ms


def dead_users(
    table: str, values: Iterable[tuple[int, Any]], now_ms: int, cfg: EngineConfig
) -> list[int]:
    """The users of ``values`` (user, table value) whose value in ``table`` is dead at
    ``now_ms`` (the grace is ``cfg.table_expiry_grace_ms``)."""
    newest, lifetime = NEWEST[table], lifetimes(cfg)[table]
    grace = cfg.table_expiry_grace_ms
    return [u for u, v in values if is_dead(newest(v), now_ms, lifetime, grace)]


def dead_states(
    table: str,
    states: Iterable[tuple[int, State]],
    now_ms: int,
    cfg: EngineConfig,
) -> list[int]:
    """:func:`dead_users` over decoded states (the simulator's dicts)."""
    lifetime, grace = lifetimes(cfg)[table], cfg.table_expiry_grace_ms
    return [u for u, s in states if is_dead(state_newest_ms(s), now_ms, lifetime, grace)]
