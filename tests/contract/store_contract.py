"""The FeatureStore contract, run against every backend (memory, Redis, Aerospike).

A backend's test module subclasses :class:`StoreContract` and provides the ``store`` fixture.
"""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from schemas.vectors import VectorDtype
from store.history_values import decode_history, encode_history
from store.protocol import FeatureStore, ReadBatch
from store.state_slots import split_states
from store.values import decode_neighbours, decode_vector, encode_state, version_tag

T0 = 1_700_000_000_000
HOUR = 3_600_000


def pair(user: int, item: int, t: int = T0, seed: int = 0, dim: int = 8) -> PairEmbedding:
    vec = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return PairEmbedding.from_array(user, item, t, "fm-test", vec)


class StoreContract:
    """Behaviour every :class:`FeatureStore` must show."""

    def test_is_a_feature_store(self, store: FeatureStore) -> None:
        assert isinstance(store, FeatureStore)
        assert store.ping()

    def test_pair_round_trip_keeps_vector_time_and_version(self, store: FeatureStore) -> None:
        rec = pair(1, 10, seed=1)
        store.write_pairs([rec], ttl_ms=HOUR)
        res = store.read(ReadBatch(pairs=[(1, 10)]), timeout_ms=500)
        assert res.pairs[0] is not None
        got = decode_vector(res.pairs[0])
        assert got.event_time_ms == T0
        assert got.version_tag == version_tag("fm-test")
        np.testing.assert_array_equal(got.array(), rec.array())

    def test_absent_keys_are_none_and_results_aligned(self, store: FeatureStore) -> None:
        store.write_pairs([pair(2, 20, seed=2), pair(2, 22, seed=3)], ttl_ms=HOUR)
        res = store.read(ReadBatch(pairs=[(2, 21), (2, 22), (2, 20), (3, 20)]), timeout_ms=500)
        assert res.pairs[0] is None and res.pairs[3] is None
        np.testing.assert_array_equal(
            decode_vector(res.pairs[1]).array(), pair(2, 22, seed=3).array()
        )
        np.testing.assert_array_equal(
            decode_vector(res.pairs[2]).array(), pair(2, 20, seed=2).array()
        )

    def test_an_older_pair_never_replaces_a_newer_one(self, store: FeatureStore) -> None:
        """A resumed ("zombie") FM worker's stale batch must not overwrite what the partition's
        new owner stored since (issue 24 item 7)."""
        newer, older = pair(6, 60, t=T0 + 5000, seed=6), pair(6, 60, t=T0, seed=7)
        fresh, absent = pair(6, 61, t=T0 + 9000, seed=8), pair(6, 62, t=T0, seed=9)
        store.write_pairs([newer, pair(6, 61, t=T0 + 1000, seed=10)], ttl_ms=HOUR)
        skipped = getattr(store, "stale_skipped", 0)
        store.write_pairs([older, fresh, absent], ttl_ms=HOUR)
        res = store.read(ReadBatch(pairs=[(6, 60), (6, 61), (6, 62)]), 500)
        got = [decode_vector(v) for v in res.pairs]
        assert [g.event_time_ms for g in got] == [T0 + 5000, T0 + 9000, T0]
        np.testing.assert_array_equal(got[0].array(), newer.array())
        np.testing.assert_array_equal(got[1].array(), fresh.array())
        assert getattr(store, "stale_skipped", 0) - skipped == 1
        # another model's value is not comparable (a new model's backlog replaces the old
        # model's fresher pairs; the reader's version gate decides what is served)
        vec = np.random.default_rng(11).normal(size=8).astype(np.float32)
        upgraded = PairEmbedding.from_array(6, 60, T0 + 1, "fm-next", vec)
        store.write_pairs([upgraded], ttl_ms=HOUR)
        got_next = decode_vector(store.read(ReadBatch(pairs=[(6, 60)]), 500).pairs[0])
        assert (got_next.event_time_ms, got_next.version_tag) == (T0 + 1, version_tag("fm-next"))

    def test_an_older_aggregate_never_replaces_a_newer_one(self, store: FeatureStore) -> None:
        def agg(t: int, seed: int) -> UserAggregate:
            vec = np.random.default_rng(seed).normal(size=8).astype(np.float32)
            return UserAggregate.from_array(7, t, 24 * HOUR, 3, "fm-test", vec, VectorDtype.FLOAT32)

        store.write_aggregates([agg(T0 + 5000, 1)], ttl_ms=HOUR)
        store.write_aggregates([agg(T0, 2)], ttl_ms=HOUR)
        got = decode_vector(store.read(ReadBatch(aggregates=[7]), 500).aggregates[0])
        assert got.event_time_ms == T0 + 5000
        np.testing.assert_array_equal(got.array(), agg(T0 + 5000, 1).array())
        store.write_aggregates([agg(T0 + 6000, 3)], ttl_ms=HOUR)
        got = decode_vector(store.read(ReadBatch(aggregates=[7]), 500).aggregates[0])
        assert got.event_time_ms == T0 + 6000

    def test_write_is_idempotent_last_write_wins(self, store: FeatureStore) -> None:
        first, second = pair(4, 40, t=T0, seed=4), pair(4, 40, t=T0 + 1000, seed=5)
        store.write_pairs([first], ttl_ms=HOUR)
        store.write_pairs([first], ttl_ms=HOUR)
        store.write_pairs([second], ttl_ms=HOUR)
        got = decode_vector(store.read(ReadBatch(pairs=[(4, 40)]), 500).pairs[0])
        assert got.event_time_ms == T0 + 1000

    def test_one_read_returns_pairs_aggregate_and_neighbours(self, store: FeatureStore) -> None:
        vec = np.linspace(-1, 1, 8, dtype=np.float32)
        agg = UserAggregate.from_array(5, T0, 24 * HOUR, 3, "fm-test", vec, VectorDtype.FLOAT32)
        nbs = NeighbourList(5, T0, (6, 7), (0.9, 0.5))
        store.write_pairs([pair(5, 50)], HOUR)
        store.write_aggregates([agg], HOUR)
        store.write_neighbours([nbs], HOUR)
        res = store.read(ReadBatch(pairs=[(5, 50)], aggregates=[5, 6], neighbours=[5]), 500)
        assert res.pairs[0] is not None
        got_agg = decode_vector(res.aggregates[0])
        assert got_agg.count == 3
        np.testing.assert_array_equal(got_agg.array(), vec)
        assert res.aggregates[1] is None
        got_nb = decode_neighbours(res.neighbours[0])
        assert got_nb.user_ids.tolist() == [6, 7]
        np.testing.assert_allclose(got_nb.weights, [0.9, 0.5], rtol=1e-6)

    def test_history_reads_with_the_users_embeddings_in_one_read(self, store: FeatureStore) -> None:
        """A fair VM's history comes back in the same read as the user's vectors, aligned."""
        entries = [(11, 1, T0 - 3000), (12, 0, T0 - 2000), (11, 0, T0 - 1000)]
        store.write_pairs([pair(8, 80)], HOUR)
        store.write_histories({8: encode_history(entries)}, HOUR)
        res = store.read(ReadBatch(pairs=[(8, 80)], aggregates=[8], histories=[9, 8]), 500)
        assert res.pairs[0] is not None and res.aggregates == [None]
        assert res.histories[0] is None and res.histories[1] is not None
        got = decode_history(res.histories[1])
        assert list(zip(got.items, got.labels, got.times_ms, strict=True)) == entries

    def test_state_reads_with_the_users_embeddings_in_one_read(self, store: FeatureStore) -> None:
        """The state tier's user state comes back in the same read, aligned, value intact."""
        state = np.random.default_rng(12).normal(size=40).astype(np.float32)
        store.write_pairs([pair(13, 130)], HOUR)
        store.write_states({13: encode_state(T0, "fm-test", state, VectorDtype.FLOAT16)}, HOUR)
        batch = ReadBatch(pairs=[(13, 130)], aggregates=[13], histories=[13], states=[14, 13])
        res = store.read(batch, 500)
        assert res.pairs[0] is not None and res.aggregates == [None] and res.histories == [None]
        assert res.states[0] is None and res.states[1] is not None
        got = decode_vector(res.states[1])
        assert (got.event_time_ms, got.dim, got.version_tag) == (T0, 40, version_tag("fm-test"))
        np.testing.assert_array_equal(got.array(), state.astype(np.float16).astype(np.float32))

    def test_an_older_state_never_replaces_a_newer_one(self, store: FeatureStore) -> None:
        new, old = (np.full(6, x, np.float32) for x in (1.0, 2.0))
        store.write_states({15: encode_state(T0 + 10, "fm-test", new, VectorDtype.FLOAT16)}, HOUR)
        store.write_states({15: encode_state(T0, "fm-test", old, VectorDtype.FLOAT16)}, HOUR)
        got = decode_vector(store.read(ReadBatch(states=[15]), 500).states[0])
        assert got.event_time_ms == T0 + 10
        np.testing.assert_array_equal(got.array(), new)

    def test_the_previous_state_is_kept_beside_the_newest(self, store: FeatureStore) -> None:
        """The state key keeps the two newest states, newest first (a redelivery replaces the
        newest only), so a lookup at the newest's own event time has the previous one."""
        states = [np.full(6, x, np.float32) for x in (1.0, 2.0, 3.0, 4.0)]
        for t, x in ((T0, states[0]), (T0 + 10, states[1]), (T0 + 20, states[2])):
            store.write_states({16: encode_state(t, "fm-test", x, VectorDtype.FLOAT16)}, HOUR)
        store.write_states(
            {16: encode_state(T0 + 20, "fm-test", states[3], VectorDtype.FLOAT16)}, HOUR
        )
        raw = store.read(ReadBatch(states=[16]), 500).states[0]
        assert raw is not None
        got = [decode_vector(v) for v in split_states(raw)]
        assert [g.event_time_ms for g in got] == [T0 + 20, T0 + 10]
        np.testing.assert_array_equal(got[0].array(), states[3])
        np.testing.assert_array_equal(got[1].array(), states[1])
        # a newest more than the TTL older than the new state is not kept beside it
        late = T0 + 20 + HOUR + 1
        store.write_states(
            {16: encode_state(late, "fm-test", states[0], VectorDtype.FLOAT16)}, HOUR
        )
        raw = store.read(ReadBatch(states=[16]), 500).states[0]
        assert raw is not None
        assert [decode_vector(v).event_time_ms for v in split_states(raw)] == [late]

    def test_empty_batch_reads_nothing(self, store: FeatureStore) -> None:
        res = store.read(ReadBatch(), 500)
        assert res.pairs == [] and res.aggregates == [] and res.neighbours == []

    def test_500_candidate_read(self, store: FeatureStore) -> None:
        items = list(range(1000, 1500))
        store.write_pairs([pair(8, i, seed=i) for i in items[::2]], HOUR)
        res = store.read(ReadBatch(pairs=[(8, i) for i in items]), 2000)
        present = [v is not None for v in res.pairs]
        assert present == [i % 2 == 0 for i in range(500)]

    @pytest.mark.parametrize("ttl_ms", [1_500])
    def test_physical_ttl_expires(self, store: FeatureStore, ttl_ms: int, advance) -> None:
        store.write_pairs([pair(9, 90)], ttl_ms=ttl_ms)
        assert store.read(ReadBatch(pairs=[(9, 90)]), 500).pairs[0] is not None
        advance(ttl_ms + 600)
        assert store.read(ReadBatch(pairs=[(9, 90)]), 500).pairs[0] is None

    def test_snapshots_round_trip(self, store: FeatureStore) -> None:
        store.write_snapshot("w1", b"abc", HOUR)
        store.write_snapshot("w2", b"\x00\x01", HOUR)
        store.write_snapshot("w1", b"abcd", HOUR)
        got = store.read_snapshots()
        assert got["w1"] == b"abcd" and got["w2"] == b"\x00\x01"
