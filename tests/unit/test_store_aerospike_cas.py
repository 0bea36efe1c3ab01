"""Aerospike's conditional writes (check-and-set on the generation): the pure fold and plan,
and, over the fake client, another writer slipping in between the read and the guarded write."""

from __future__ import annotations

import numpy as np
import pytest

from store.aerospike_cas import GuardedWrite, Stored, fold, group_in_order, plan
from store.conditional_writes import newer_or_equal
from store.protocol import ReadBatch
from store.values import decode_vector, encode_pair
from tests.contract.store_contract import HOUR, T0, pair


def _pair_rule(old: bytes | None, new: bytes) -> bytes | None:
    return new if newer_or_equal(old, new) else None


def _value(t: int, seed: int = 0) -> bytes:
    return encode_pair(pair(1, 10, t=t, seed=seed))


# -- the pure part -----------------------------------------------------------------------------


def test_fold_applies_new_values_in_order_and_counts_the_skipped() -> None:
    old, older, newer, newest = _value(T0), _value(T0 - 5), _value(T0 + 5), _value(T0 + 9)
    assert fold(old, [older], _pair_rule) == (None, 1)  # nothing to write
    assert fold(old, [newest, newer], _pair_rule) == (newest, 1)
    assert fold(None, [newer, newest], _pair_rule) == (newest, 0)


def test_plan_guards_stored_records_by_generation_and_absent_ones_by_creation() -> None:
    stored = {"a": Stored(_value(T0), 7)}
    pending = group_in_order([("a", _value(T0 + 1)), ("b", _value(T0)), ("c", _value(T0 - 1))])
    stored["c"] = Stored(_value(T0), 2)
    got = plan(stored, pending, _pair_rule)
    assert got.writes == [GuardedWrite("a", _value(T0 + 1), 7), GuardedWrite("b", _value(T0), 0)]
    assert got.skipped == {"a": 0, "b": 0, "c": 1}


# -- over the fake client ----------------------------------------------------------------------

pytest.importorskip("aerospike", reason="the 'aerospike' extra is not installed")

from store.aerospike_store import AerospikeStore  # noqa: E402
from store.errors import StoreUnavailable  # noqa: E402
from tests.fakes_aerospike import FakeAerospikeClient  # noqa: E402


@pytest.fixture()
def fake() -> FakeAerospikeClient:
    return FakeAerospikeClient(clock_ms=lambda: T0)


def _store(fake: FakeAerospikeClient) -> AerospikeStore:
    return AerospikeStore("fake:3000", "test", "t", client=fake)


def _stored_time(store: AerospikeStore) -> int:
    raw = store.read(ReadBatch(pairs=[(1, 10)]), 500).pairs[0]
    assert raw is not None
    return decode_vector(raw).event_time_ms


def test_a_newer_pair_written_between_read_and_write_is_not_overwritten(
    fake: FakeAerospikeClient,
) -> None:
    """The zombie FM worker's case: it read "absent", the new owner then stored a newer pair;
    its create is refused, it reads again, and the rule skips its older pair."""
    zombie, new_owner = _store(fake), _store(fake)
    fake.on_call["batch_write"] = lambda: new_owner.write_pairs(
        [pair(1, 10, t=T0 + 5000, seed=2)], HOUR
    )
    zombie.write_pairs([pair(1, 10, t=T0, seed=1)], HOUR)
    assert _stored_time(zombie) == T0 + 5000
    assert (zombie.cas_retries, zombie.stale_skipped) == (1, 1)


def test_a_record_replaced_between_read_and_write_is_read_again(
    fake: FakeAerospikeClient,
) -> None:
    """Generation guard: the stored pair changes (to an older-than-ours value of the same
    generation chain) after our read; our write is refused, re-read and then applied."""
    mine, other = _store(fake), _store(fake)
    mine.write_pairs([pair(1, 10, t=T0, seed=1)], HOUR)
    fake.on_call["batch_write"] = lambda: other.write_pairs(
        [pair(1, 10, t=T0 + 1000, seed=2)], HOUR
    )
    mine.write_pairs([pair(1, 10, t=T0 + 3000, seed=3)], HOUR)
    raw = mine.read(ReadBatch(pairs=[(1, 10)]), 500).pairs[0]
    assert raw is not None
    got = decode_vector(raw)
    assert got.event_time_ms == T0 + 3000
    np.testing.assert_array_equal(got.array(), pair(1, 10, t=T0 + 3000, seed=3).array())
    assert (mine.cas_retries, mine.stale_skipped) == (1, 0)


def test_a_key_contended_on_every_attempt_is_an_error_not_a_silent_loss(
    fake: FakeAerospikeClient,
) -> None:
    mine, other = _store(fake), _store(fake)
    mine.cas_attempts = 3
    times = iter(range(T0 + 10, T0 + 100))

    def interfere() -> None:
        other._write_values([(other._key("pair", "1:10"), _value(next(times)))], HOUR)
        fake.on_call["batch_write"] = interfere  # every guarded write of ``mine`` loses

    fake.on_call["batch_write"] = interfere
    with pytest.raises(StoreUnavailable, match="changed by other writers on each of 3 attempts"):
        mine.write_pairs([pair(1, 10, t=T0 + 5000)], HOUR)
    assert mine.cas_retries == 3


def test_each_conditional_write_is_one_read_and_one_guarded_batch(
    fake: FakeAerospikeClient,
) -> None:
    store = _store(fake)
    store.write_pairs([pair(1, i, t=T0) for i in range(5)], HOUR)
    store.write_pairs([pair(1, i, t=T0 - 1) for i in range(5)], HOUR)  # all older: no write
    assert [name for name, _ in fake.calls] == ["batch_read", "batch_write", "batch_read"]
    assert store.stale_skipped == 5
