"""Representations and ledgers are stored with their numbers packed (base64 float32 / int64
inside the JSON table value): the same values come back, values written before are still read,
and a corrupt one is refused with a clear error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streams.engine.packed import FLOAT32, INT64, pack, unpack
from streams.engine.state import LEDGER, REPS
from streams.engine.steps.speculate import SavedRep
from streams.engine.steps.verify import LedgerState

T0 = 1_700_000_000_000


def _rep() -> SavedRep:
    vector = np.random.default_rng(1).normal(size=64).astype(np.float32).tolist()
    return SavedRep(vector, T0, 1234)


def _ledger() -> LedgerState:
    items = np.random.default_rng(2).choice(50_000, 150, replace=False).tolist()
    return LedgerState({i: T0 + k for k, i in enumerate(items)}, [f"r{k}" for k in range(16)])


def test_pack_round_trips_and_refuses_what_it_did_not_write() -> None:
    rows = np.array([[1, T0], [2**62, -5]], np.int64)
    np.testing.assert_array_equal(unpack(pack(rows, INT64), INT64, 2), rows)
    assert unpack(pack([], INT64), INT64, 2).shape == (0, 2)
    with pytest.raises(ValueError, match="not base64"):
        unpack("not base64!", INT64)
    with pytest.raises(ValueError, match="not rows of 16 bytes"):
        unpack(pack([1, 2, 3], INT64), INT64, 2)


def test_a_representation_comes_back_exactly_and_old_values_still_read() -> None:
    rep = _rep()
    stored = json.loads(json.dumps(REPS.dump(rep)))
    assert isinstance(stored[0], str) and REPS.load(stored) == rep
    old = json.loads(json.dumps([rep.vector, rep.seen_at_ms, rep.version_tag]))
    assert REPS.load(old) == rep
    assert len(json.dumps(stored)) < len(json.dumps(old)) / 3


def test_a_ledger_comes_back_exactly_and_old_values_still_read() -> None:
    ledger = _ledger()
    stored = json.loads(json.dumps(LEDGER.dump(ledger)))
    assert set(stored) == {"p", "requests"} and LEDGER.load(stored) == ledger
    pairs = [[i, t] for i, t in ledger.pairs.items()]
    assert LEDGER.load({"pairs": pairs, "requests": ledger.requests}) == ledger
    assert LEDGER.load(pairs) == LedgerState(ledger.pairs, [])  # before request ids
    assert LEDGER.load(LEDGER.dump(LedgerState())) == LedgerState()
    assert len(json.dumps(stored)) < len(json.dumps({"pairs": pairs, "requests": ledger.requests}))


def test_a_corrupt_packed_value_raises_a_value_error() -> None:
    """The agents dead-letter or report a value error of one user's state; they must not get
    a vector of the wrong width or a misaligned ledger."""
    with pytest.raises(ValueError):
        REPS.load(["AAAA", T0, 1])  # 3 bytes: not whole float32s
    with pytest.raises(ValueError):
        LEDGER.load({"p": pack([1, 2, 3], INT64), "requests": []})
    assert FLOAT32.itemsize == 4
