"""streams.engine.state: one codec per table of per-user state, used by every reader."""

from __future__ import annotations

import json

import numpy as np

from schemas.records import PairEmbedding
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.recurrence import EMPTY_MEMORY
from streams.engine.state import (
    AGGREGATES,
    CODECS,
    HISTORY,
    LEDGER,
    RECENT,
    REPS,
    aggregate_newest_ms,
)
from streams.engine.steps.speculate import SavedRep
from streams.engine.steps.verify import LedgerState

T0 = 1_700_000_000_000
H = 3_600_000


def _through_json(value: object) -> object:
    """What a Faust table hands back: the value after a JSON round trip."""
    return json.loads(json.dumps(value))


def test_every_table_has_one_codec_and_the_workers_create_exactly_those() -> None:
    from streams.live.app import TABLES

    assert set(CODECS) == {"history", "ledger", "aggregates", "reps", "recent"} == set(TABLES)
    for codec in CODECS.values():
        codec.load(None)  # a user never seen decodes (to its empty state)


def test_each_value_survives_the_table_round_trip() -> None:
    entries = [(10, 1, T0), (11, 0, T0 + 5)]
    assert HISTORY.load(_through_json(HISTORY.dump(entries))) == entries
    ledger = LedgerState({5: T0, 7: T0 + 1}, ["r1", "r2"])
    assert LEDGER.load(_through_json(LEDGER.dump(ledger))) == ledger
    rep = SavedRep([0.5, -0.25], T0, 1234)
    assert REPS.load(_through_json(REPS.dump(rep))) == rep
    assert REPS.dump(None) is None and REPS.load(None) is None
    memory = EMPTY_MEMORY.remember("r1", [9, 4, 9], T0).remember("r2", [4], T0 + 1)
    assert RECENT.load(_through_json(RECENT.dump(memory))) == memory
    assert RECENT.load(None) == EMPTY_MEMORY
    state = AggregateState()
    vec = np.arange(4, dtype=np.float32)
    RollingAggregator(24 * H, H).add(state, [PairEmbedding.from_array(1, 9, T0, "fm", vec)])
    back = AGGREGATES.load(_through_json(AGGREGATES.dump(state)))
    assert back.newest_ms == T0 and back.seen == {(9, T0)} and back.version == "fm"
    np.testing.assert_array_equal(next(iter(back.buckets.values()))[1], vec)
    # what the neighbour job reads for every user on restart, without decoding the buckets
    assert aggregate_newest_ms(_through_json(AGGREGATES.dump(state))) == T0
    assert aggregate_newest_ms(None) is None
