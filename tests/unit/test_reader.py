"""FeatureReader: tier order, freshness boundaries, neighbours, deadlines, round-trip budget."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.errors import StoreTimeout, StoreUnavailable
from store.memory import InMemoryStore
from store.protocol import ReadBatch, ReadResult
from store.reader import FeatureReader
from store.tiers import Tier
from store.values import version_tag
from streams.engine.config import ENGINE_DEFAULTS

T0 = 1_700_000_000_000
HOUR = 3_600_000
DIM = 4


def vec(x: float) -> np.ndarray:
    return np.full(DIM, x, dtype=np.float32)


def pair(u: int, i: int, t: int, x: float, version: str = "fm") -> PairEmbedding:
    return PairEmbedding.from_array(u, i, t, version, vec(x))


def agg(u: int, t: int, x: float) -> UserAggregate:
    return UserAggregate.from_array(u, t, 24 * HOUR, 2, "fm", vec(x))


@pytest.fixture()
def store() -> InMemoryStore:
    return InMemoryStore(clock_ms=lambda: T0)  # physical expiry never interferes here


def reader(store: InMemoryStore, **kw: object) -> FeatureReader:
    return FeatureReader(
        store,
        replace(
            ENGINE_DEFAULTS.reader,
            dim=DIM,
            pair_ttl_ms=HOUR,
            aggregate_ttl_ms=HOUR,
            neighbour_ttl_ms=HOUR,
            **kw,
        ),
    )  # type: ignore[arg-type]


def test_exact_then_aggregate_then_missing(store: InMemoryStore) -> None:
    store.write_pairs([pair(1, 10, T0, 0.5)], HOUR)
    store.write_aggregates([agg(1, T0, 0.25)], HOUR)
    vectors, tiers, ages = reader(store).lookup(1, [10, 11], T0 + 1000)
    assert tiers.tolist() == [Tier.EXACT, Tier.AGGREGATE]
    np.testing.assert_allclose(vectors, [vec(0.5), vec(0.25)])
    assert ages.tolist() == [1000, 1000]
    vectors, tiers, ages = reader(store).lookup(2, [10], T0 + 1000)
    assert tiers.tolist() == [Tier.MISSING] and ages.tolist() == [-1]
    assert not vectors.any()


def test_value_serves_only_strictly_later_requests(store: InMemoryStore) -> None:
    store.write_pairs([pair(1, 10, T0, 0.5)], HOUR)
    r = reader(store)
    assert r.lookup(1, [10], T0).tiers[0] == Tier.MISSING  # the request that caused it
    assert r.lookup(1, [10], T0 - 1).tiers[0] == Tier.MISSING  # an earlier request
    assert r.lookup(1, [10], T0 + 1).tiers[0] == Tier.EXACT


def test_ttl_boundary_is_inclusive(store: InMemoryStore) -> None:
    store.write_pairs([pair(1, 10, T0, 0.5)], HOUR)
    r = reader(store)
    assert r.lookup(1, [10], T0 + HOUR).tiers[0] == Tier.EXACT
    assert r.lookup(1, [10], T0 + HOUR + 1).tiers[0] == Tier.MISSING


def test_other_model_version_is_rejected(store: InMemoryStore) -> None:
    store.write_pairs([pair(1, 10, T0, 0.5, version="old")], HOUR)
    r = reader(store, version_tag=version_tag("fm"))
    assert r.lookup(1, [10], T0 + 1).tiers[0] == Tier.MISSING


def test_neighbour_pairs_weighted_then_neighbour_aggregates(store: InMemoryStore) -> None:
    store.write_neighbours([NeighbourList(1, T0, (2, 3, 4), (0.75, 0.25, -0.5))], HOUR)
    store.write_pairs(
        [pair(2, 10, T0, 1.0), pair(3, 10, T0 - 10, 3.0), pair(4, 10, T0, 100.0)], HOUR
    )
    store.write_aggregates([agg(3, T0, 8.0)], HOUR)
    vectors, tiers, ages = reader(store).lookup(1, [10, 11], T0 + 100)
    # item 10 from the neighbours' pairs (item-aware), item 11 from their aggregates
    assert tiers.tolist() == [Tier.NEIGHBOUR_ITEM, Tier.NEIGHBOUR_AGGREGATE]
    # item 10: weights .75/.25 over users 2 and 3 (user 4 has a negative weight: ignored)
    np.testing.assert_allclose(vectors[0], vec(0.75 * 1.0 + 0.25 * 3.0))
    assert ages[0] == 110  # the oldest contributing value
    # item 11: no neighbour has the pair -> weighted mean of neighbour aggregates (only user 3)
    np.testing.assert_allclose(vectors[1], vec(8.0))
    assert store.round_trips == 2


class _Cold:
    def neighbours_for_items(
        self, item_ids: Sequence[int], k: int, exclude_user: int
    ) -> tuple[np.ndarray, np.ndarray]:
        assert exclude_user == 9
        return np.array([2], np.int64), np.array([1.0], np.float32)


def test_cold_start_index_serves_user_without_neighbour_list(store: InMemoryStore) -> None:
    store.write_pairs([pair(2, 10, T0, 1.5)], HOUR)
    r = FeatureReader(store, replace(ENGINE_DEFAULTS.reader, dim=DIM), cold_start=_Cold())
    assert r.lookup(9, [10], T0 + 1).tiers.tolist() == [Tier.NEIGHBOUR_ITEM]
    assert r.stats.cold_start_queries == 1


def test_500_candidates_take_at_most_two_round_trips(store: InMemoryStore) -> None:
    items = list(range(500))
    store.write_pairs([pair(1, i, T0, 1.0) for i in items[:100]], HOUR)
    store.write_neighbours([NeighbourList(1, T0, tuple(range(2, 10)), (0.5,) * 8)], HOUR)
    store.write_pairs([pair(u, i, T0, 2.0) for u in range(2, 10) for i in items[100:300]], HOUR)
    store.write_aggregates([agg(5, T0, 3.0)], HOUR)
    r = reader(store)
    _, tiers, _ = r.lookup(1, items, T0 + 1)
    assert store.round_trips <= 2
    assert np.bincount(tiers, minlength=len(Tier)).tolist() == [100, 0, 0, 400, 0, 0]


class _FailingStore(InMemoryStore):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "counter"),
    [(StoreTimeout("slow"), "timeouts"), (StoreUnavailable("down"), "store_errors")],
)
def test_store_failure_gives_missing_and_is_counted(exc: Exception, counter: str) -> None:
    r = FeatureReader(_FailingStore(exc), replace(ENGINE_DEFAULTS.reader, dim=DIM))
    vectors, tiers, _ = r.lookup(1, [1, 2, 3], T0)
    assert tiers.tolist() == [Tier.MISSING] * 3 and not vectors.any()
    assert getattr(r.stats, counter) == 1


def test_exhausted_deadline_skips_second_round(store: InMemoryStore) -> None:
    store.write_neighbours([NeighbourList(1, T0, (2,), (1.0,))], HOUR)
    store.write_pairs([pair(2, 10, T0, 1.0)], HOUR)
    r = reader(store)
    assert r.lookup(1, [10], T0 + 1, deadline_ms=0.0).tiers[0] == Tier.MISSING
    assert r.stats.timeouts == 1 and store.round_trips == 1


def test_empty_candidate_list() -> None:
    r = FeatureReader(InMemoryStore(), replace(ENGINE_DEFAULTS.reader, dim=DIM))
    vectors, tiers, _ = r.lookup(1, [], T0)
    assert vectors.shape == (0, DIM) and tiers.shape == (0,)


def test_neighbour_aggregates_may_be_older_than_the_user_aggregate_ttl(
    store: InMemoryStore,
) -> None:
    store.write_neighbours([NeighbourList(1, T0 + 2 * HOUR, (2,), (1.0,))], HOUR)
    store.write_aggregates([agg(2, T0, 4.0), agg(1, T0, 9.0)], 100 * HOUR)
    r = FeatureReader(
        store,
        replace(
            ENGINE_DEFAULTS.reader,
            dim=DIM,
            pair_ttl_ms=HOUR,
            aggregate_ttl_ms=HOUR,
            neighbour_ttl_ms=HOUR,
            neighbour_aggregate_ttl_ms=3 * HOUR,
        ),
    )
    vectors, tiers, ages = r.lookup(1, [10], T0 + 2 * HOUR + 1)
    # the user's own aggregate (2 h old) is past its 1 h TTL; the neighbour's is within 3 h
    assert tiers.tolist() == [Tier.NEIGHBOUR_AGGREGATE] and ages.tolist() == [2 * HOUR + 1]
    np.testing.assert_allclose(vectors[0], vec(4.0))
    assert r.lookup(1, [10], T0 + 3 * HOUR + 1).tiers.tolist() == [Tier.MISSING]


def test_lookup_never_raises_on_unexpected_errors(store: InMemoryStore) -> None:
    class Broken:
        def neighbours_for_items(
            self, item_ids: Sequence[int], k: int, exclude_user: int
        ) -> tuple[np.ndarray, np.ndarray]:
            raise ValueError("matmul: size 16 is different from 8")  # a foreign snapshot

    store.write_pairs([pair(9, 10, T0, 1.5)], HOUR)
    r = FeatureReader(store, replace(ENGINE_DEFAULTS.reader, dim=DIM), cold_start=Broken())
    vectors, tiers, ages = r.lookup(9, [10, 11], T0 + 1)
    # the exact hit was read before the failure, but a half-done lookup serves nothing
    assert tiers.tolist() == [Tier.MISSING, Tier.MISSING]
    assert not vectors.any() and ages.tolist() == [-1, -1]
    assert r.stats.internal_errors == 1


INT64_MIN = -(2**63)


@pytest.mark.parametrize(
    ("event_time_ms", "value"),
    [(INT64_MIN, float("nan")), (INT64_MIN, 1.0), (T0, float("nan")), (T0, float("inf"))],
)
def test_corrupt_value_is_counted_and_never_served(
    store: InMemoryStore, event_time_ms: int, value: float
) -> None:
    # encoders do not validate: a record that skipped validation (or a bit flip) reaches the store
    bad = PairEmbedding.from_array(1, 10, event_time_ms, "fm", vec(value))
    store.write_pairs([bad], HOUR)
    store.write_aggregates([agg(1, T0, 0.25)], HOUR)
    r = reader(store)
    vectors, tiers, _ = r.lookup(1, [10], T0 + 1)
    assert tiers.tolist() == [Tier.AGGREGATE]  # falls to the next tier
    np.testing.assert_allclose(vectors[0], vec(0.25))
    assert r.stats.corrupt_values == 1


class _SlowStore(InMemoryStore):
    """Answers correctly but late (a store that ignores its timeout)."""

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        time.sleep(0.03)
        return super().read(batch, timeout_ms)


def test_a_late_lookup_counts_as_timeout_even_without_a_store_timeout() -> None:
    slow = _SlowStore(clock_ms=lambda: T0)
    slow.write_pairs([pair(1, 10, T0, 0.5)], HOUR)
    r = FeatureReader(
        slow, replace(ENGINE_DEFAULTS.reader, dim=DIM, pair_ttl_ms=HOUR, deadline_ms=5.0)
    )
    assert r.lookup(1, [10], T0 + 1).tiers.tolist() == [Tier.EXACT]  # late but correct: served
    assert r.stats.timeouts == 1
    r.lookup(1, [10], T0 + 1, deadline_ms=1_000.0)
    assert r.stats.timeouts == 1  # in time: not counted


def test_invalid_ids_give_missing_not_an_exception(store: InMemoryStore) -> None:
    r = reader(store)
    vectors, tiers, _ = r.lookup(1, ["x", None], T0)  # type: ignore[list-item]
    assert tiers.tolist() == [Tier.MISSING] * 2 and not vectors.any()
    assert r.stats.internal_errors == 1


class _Warm(InMemoryStore):
    warmed = 0

    def warm(self) -> None:
        self.warmed += 1


def test_reader_warms_a_store_that_keeps_connections() -> None:
    s = _Warm()
    FeatureReader(s, replace(ENGINE_DEFAULTS.reader, dim=DIM))
    assert s.warmed == 1


def _agg_value(dim: int, t: int, version: str = "fm") -> UserAggregate:
    return UserAggregate.from_array(1, t, 24 * HOUR, 2, version, np.full(dim, 0.25, np.float32))


@pytest.mark.parametrize(
    ("record", "tier", "corrupt"),
    [
        (_agg_value(DIM, T0), Tier.AGGREGATE, 0),
        (_agg_value(DIM, T0, version="old"), Tier.MISSING, 0),  # another FM: not served
        (_agg_value(DIM * 2, T0), Tier.MISSING, 1),  # another dim: corrupt
        (_agg_value(DIM, T0 + 5), Tier.MISSING, 0),  # from a later event
        (_agg_value(DIM, T0 - HOUR), Tier.MISSING, 0),  # past its TTL at T0 + 1
        (_agg_value(DIM, -(2**63)), Tier.MISSING, 1),  # out of bounds: corrupt
    ],
)
def test_own_aggregate_is_checked_like_every_other_value(
    store: InMemoryStore, record: UserAggregate, tier: Tier, corrupt: int
) -> None:
    store.write_aggregates([record], HOUR)
    r = reader(store, version_tag=version_tag("fm"))
    vectors, tiers, _ = r.lookup(1, [10, 11], T0 + 1)
    assert tiers.tolist() == [tier, tier] and r.stats.corrupt_values == corrupt
    if tier == Tier.AGGREGATE:
        np.testing.assert_allclose(vectors, np.full((2, DIM), 0.25))


def test_a_corrupt_own_aggregate_falls_through_to_neighbours(store: InMemoryStore) -> None:
    store.write_aggregates([_agg_value(DIM, 2**62), agg(2, T0, 4.0)], HOUR)
    store.write_neighbours([NeighbourList(1, T0, (2,), (1.0,))], HOUR)
    r = reader(store)
    vectors, tiers, _ = r.lookup(1, [10], T0 + 1)
    assert tiers.tolist() == [Tier.NEIGHBOUR_AGGREGATE] and r.stats.corrupt_values == 1
    np.testing.assert_allclose(vectors[0], vec(4.0))


def _lapsed_world(store: InMemoryStore, items: list[int]) -> None:
    """User 1: a few exact pairs, no aggregate, neighbours 2-4 with pairs, aggregates and one
    corrupt pair of an item user 1 has exactly (never needed, so never decoded or counted)."""
    store.write_pairs([pair(1, i, T0, 1.0) for i in items[:3]], HOUR)
    store.write_neighbours([NeighbourList(1, T0, (2, 3, 4), (0.9, 0.5, 0.2))], HOUR)
    store.write_pairs([pair(u, i, T0, float(u)) for u in (2, 3) for i in items[3:6]], HOUR)
    store.write_pairs([PairEmbedding.from_array(2, items[0], T0, "fm", vec(float("nan")))], HOUR)
    store.write_aggregates([agg(3, T0, 5.0), agg(4, T0, 7.0)], HOUR)


@pytest.mark.parametrize(
    ("max_pair_keys", "round_trips"),
    # 3 neighbours x 10 items fit 2,000 (round 1 takes the pairs); 7 rest items x 3 exceed 12
    # (aggregates only); at 25 the pairs of all items do not fit round 1 but the rest's do
    [(2_000, 1), (12, 1), (25, 2)],
)
def test_a_repeat_lookup_reads_its_neighbours_in_one_round_trip(
    store: InMemoryStore, max_pair_keys: int, round_trips: int
) -> None:
    items = list(range(10, 20))
    _lapsed_world(store, items)
    # a generous deadline: on a loaded machine a 20 ms one could skip round 2 (and the test)
    hinted = reader(
        store, max_neighbour_pair_keys=max_pair_keys, neighbour_hints=64, deadline_ms=60_000.0
    )
    plain = reader(
        store, max_neighbour_pair_keys=max_pair_keys, neighbour_hints=0, deadline_ms=60_000.0
    )
    want = plain.lookup(1, items, T0 + 1)
    first = hinted.lookup(1, items, T0 + 1)
    before = store.round_trips
    again = hinted.lookup(1, items, T0 + 1)
    assert store.round_trips - before == round_trips
    for got in (first, again):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    assert Tier.EXACT in want.tiers and Tier.NEIGHBOUR_AGGREGATE in want.tiers
    assert hinted.stats.corrupt_values == plain.stats.corrupt_values * 2
    assert hinted.stats.hinted_neighbour_reads == 2 - round_trips


def test_a_changed_neighbour_list_is_read_in_a_second_round(store: InMemoryStore) -> None:
    items = list(range(10, 20))
    _lapsed_world(store, items)
    r = reader(store, neighbour_hints=64, deadline_ms=60_000.0)
    r.lookup(1, items, T0 + 1)
    store.write_neighbours([NeighbourList(1, T0, (4,), (1.0,))], HOUR)  # only user 4 now
    before = store.round_trips
    vectors, tiers, _ = r.lookup(1, items, T0 + 1)
    assert store.round_trips - before == 2 and r.stats.hinted_neighbour_reads == 0
    assert tiers.tolist() == [Tier.EXACT] * 3 + [Tier.NEIGHBOUR_AGGREGATE] * 7
    np.testing.assert_allclose(vectors[3:], np.full((7, DIM), 7.0))
    store.write_aggregates([agg(1, T0, 0.5)], HOUR)  # fresh again: no neighbours, hint dropped
    assert r.lookup(1, items, T0 + 1).tiers.tolist()[3:] == [Tier.AGGREGATE] * 7
    assert 1 not in r._hints


def test_history_comes_with_round_one_and_the_same_tiers(store: InMemoryStore) -> None:
    """A fair VM's history costs no extra round trip and changes nothing else."""
    from store.history_values import encode_history

    store.write_pairs([pair(1, 10, T0, 0.5)], HOUR)
    store.write_aggregates([agg(1, T0, 0.25)], HOUR)
    store.write_histories({1: encode_history([(10, 1, T0 - 5), (12, 0, T0)])}, HOUR)
    plain = reader(store).lookup(1, [10, 11], T0 + 1000)
    before = store.round_trips
    found = reader(store).lookup_with_history(1, [10, 11], T0 + 1000)
    assert store.round_trips - before == 1
    assert found.lookup.tiers.tolist() == plain.tiers.tolist()
    np.testing.assert_array_equal(found.lookup.vectors, plain.vectors)
    assert found.history is not None
    assert found.history.items.tolist() == [10, 12] and found.history.labels.tolist() == [1, 0]
    # a user without a stored history reads as new: empty, not failed
    other = reader(store).lookup_with_history(2, [10], T0 + 1000)
    assert other.history is not None and len(other.history) == 0


def test_corrupt_history_is_counted_and_read_as_empty(store: InMemoryStore) -> None:
    from store.history_values import encode_history

    raw = bytearray(encode_history([(10, 1, T0)]))
    raw[3] ^= 1
    store.write_histories({1: bytes(raw)}, HOUR)
    r = reader(store)
    found = r.lookup_with_history(1, [10], T0 + 1000)
    assert found.history is not None and len(found.history) == 0
    assert r.stats.corrupt_values == 1


def test_failed_read_says_so_instead_of_serving_an_empty_history() -> None:
    class Down(InMemoryStore):
        def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
            raise StoreUnavailable("down")

    r = reader(Down())
    found = r.lookup_with_history(1, [10, 11], T0)
    assert found.history is None and r.stats.store_errors == 1
    assert found.lookup.tiers.tolist() == [Tier.MISSING, Tier.MISSING]
