"""Every per-user state the engine keeps between events, and the one codec of each.

The live workers keep these in Faust tables (JSON values; object keys are strings, so maps with
integer keys are stored as lists of pairs), the neighbour job restores them from the same tables
after a restart, and the simulator keeps the decoded values in dicts. One :class:`StateCodec` per
table, used by all of them, so a value written by one reader is read the same way by the others
(the neighbour job used to decode the representation and aggregate JSON by hand).

| table | value | codec |
|---|---|---|
| ``history`` | the user's recent impressions ``[(item, label, time)]`` | :data:`HISTORY` |
| ``ledger`` | pairs sent to the FM and the requests verified | :data:`LEDGER` |
| ``aggregates`` | the rolling aggregate's buckets (:class:`AggregateState`) | :data:`AGGREGATES` |
| ``reps`` | the neighbour representation (:class:`SavedRep`) | :data:`REPS` |
| ``recent`` | the user's last candidate lists, the pair memory (:class:`PairMemory`) | :data:`RECENT` |

The counts a worker derives across users are not stored on their own: the item prior counts
the lists the ``recent`` values hold and the look-ahead counts what the ``history`` values hold,
so a worker rebuilds both from those tables after a start or a rebalance
(:meth:`streams.engine.recurrence.ItemPrior.rebuild`,
:meth:`streams.engine.lookahead.Lookahead.rebuild`, :mod:`streams.live.derived_state`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from streams.engine.aggregator import AggregateState, seen_of_table
from streams.engine.history import Entry
from streams.engine.packed import INT64, pack, unpack
from streams.engine.recurrence import PairMemory
from streams.engine.steps.speculate import SavedRep
from streams.engine.steps.verify import VERIFIED_REQUESTS_KEPT, LedgerState

V = TypeVar("V")


def ledger_from_table(value: Any) -> LedgerState:
    """The user's ledger. Values written before 2026-12-07 hold the pairs as a JSON list
    (``"pairs"``), older ones are a bare list without request ids; both are still read."""
    if isinstance(value, dict):
        requests = [str(r) for r in value.get("requests", [])]
        if "p" in value:
            rows: list[list[int]] = unpack(value["p"], INT64, 2).tolist()
            return LedgerState(dict(rows), requests)  # type: ignore[arg-type]
        return LedgerState({int(i): int(t) for i, t in value.get("pairs", [])}, requests)
    return LedgerState({int(i): int(t) for i, t in value or []}, [])


def ledger_to_table(ledger: LedgerState) -> dict[str, Any]:
    """``{"p": packed (item, event time) pairs, "requests": [...]}``."""
    pairs = np.fromiter(itertools.chain.from_iterable(ledger.pairs.items()), INT64)
    return {"p": pack(pairs, INT64), "requests": ledger.requests[-VERIFIED_REQUESTS_KEPT:]}


def history_from_table(value: Any) -> list[Entry]:
    return [(int(i), int(lab), int(t)) for i, lab, t in (value or [])]


def history_to_table(entries: list[Entry]) -> list[list[int]]:
    return [list(e) for e in entries]


def _rep_to_table(rep: SavedRep | None) -> Any:
    return None if rep is None else rep.to_json()


def _aggregate_to_table(state: AggregateState) -> dict[str, Any]:
    return state.to_json()


def aggregate_newest_ms(value: Any) -> int | None:
    """The newest event time of a stored aggregate state without decoding its buckets (the
    neighbour job reads it for every user on restart); None for a user never seen."""
    return int(value["n"]) if value else None


def aggregate_confirmed(value: Any) -> Container[tuple[int, int]]:
    """The ``(item, event time)`` of every embedding a stored aggregate state folded (its
    ``seen``), without decoding its sums: the embeddings that came back, which the ledger's
    in-flight rule reads (:mod:`streams.engine.ledger`). A bucket's keys are decoded only when
    a test reaches that bucket."""
    if not value:
        return frozenset()
    return seen_of_table(value)


@dataclass(frozen=True, slots=True)
class StateCodec(Generic[V]):
    """A table's name and its value codec (``load`` accepts None: a user never seen)."""

    table: str
    load: Callable[[Any], V]
    dump: Callable[[V], Any]


HISTORY: StateCodec[list[Entry]] = StateCodec("history", history_from_table, history_to_table)
LEDGER: StateCodec[LedgerState] = StateCodec("ledger", ledger_from_table, ledger_to_table)
AGGREGATES: StateCodec[AggregateState] = StateCodec(
    "aggregates", AggregateState.from_json, _aggregate_to_table
)
REPS: StateCodec[SavedRep | None] = StateCodec("reps", SavedRep.from_json, _rep_to_table)
RECENT: StateCodec[PairMemory] = StateCodec("recent", PairMemory.from_json, PairMemory.to_json)

#: every table of per-user state, by name (the workers create exactly these)
CODECS: dict[str, StateCodec[Any]] = {
    c.table: c for c in (HISTORY, LEDGER, AGGREGATES, REPS, RECENT)
}
