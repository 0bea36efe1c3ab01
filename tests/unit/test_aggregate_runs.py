"""The aggregator folds a message as one run (one decode, one sum): the FM worker's
EmbeddingBatch gives exactly what its pair records folded one by one give, and a message that
does not decode changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import EmbeddingBatch, PairEmbedding
from schemas.vectors import VectorDtype, VectorSizeError
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.embedded_runs import runs_of
from streams.engine.steps.aggregate import aggregate_step

T0 = 1_700_000_000_000
H = 3_600_000
DIM = 8
OWN = "fm-own"


def message(
    user: int, t: int, items: list[int], seed: int, dtype: str = "FLOAT32"
) -> EmbeddingBatch:
    vectors = np.random.default_rng(seed).normal(size=(len(items), DIM)).astype(np.float32)
    raw = vectors.astype(VectorDtype(dtype).numpy).tobytes()
    return EmbeddingBatch(f"r{seed}", user, t, OWN, dtype, DIM, tuple(items), raw)


def fold_pairwise(state: AggregateState, batch: EmbeddingBatch) -> None:
    """The fold before runs: each pair record's vector added to its bucket's sum in order,
    skipping a key already counted (the reference the run fold must equal bit for bit)."""
    start = batch.event_time_ms - batch.event_time_ms % H
    for emb in batch.pairs():
        key = (emb.item_id, emb.event_time_ms)
        if key in state.seen:
            continue
        state.seen.add(start, key)
        count, total = state.buckets.get(start, (0, np.zeros(DIM, np.float64)))
        state.buckets[start] = (count + 1, total + emb.array())


@pytest.mark.parametrize("dtype", ["FLOAT32", "FLOAT16"])
def test_a_message_folds_to_the_sums_of_its_pairs_bit_for_bit(dtype: str) -> None:
    batches = [
        message(1, T0, [10, 11, 12], 1, dtype),
        message(1, T0 + 60_000, [10, 13, 13, 14], 2, dtype),  # 13 twice: counted once
        message(1, T0, [11, 15], 3, dtype),  # 11 at T0 again: a redelivery, 15 is new
        message(1, T0 + 2 * H, [16], 4, dtype),
    ]
    state, want = AggregateState(), AggregateState()
    got = aggregate_step(batches, lambda _: state, RollingAggregator(24 * H, H, own=(OWN, DIM)))
    for batch in batches:
        fold_pairwise(want, batch)
    assert not got.refused
    assert state.buckets.keys() == want.buckets.keys() and state.seen == want.seen
    for start, (count, total) in state.buckets.items():
        assert count == want.buckets[start][0]
        np.testing.assert_array_equal(total, want.buckets[start][1])
    assert got.aggregates[1].count == 8  # 3 + 3 + 1 + 1


def test_records_and_their_message_give_the_same_aggregate() -> None:
    batch = message(2, T0, [20, 21, 22], 5)
    a, b = AggregateState(), AggregateState()
    agg = RollingAggregator(24 * H, H, own=(OWN, DIM))
    from_message = agg.add(a, batch)
    from_records = agg.add(b, batch.pairs())
    assert from_message == from_records and from_message is not None


def test_records_are_grouped_into_runs_of_one_version_and_time() -> None:
    pairs = message(3, T0, [1, 2], 6).pairs() + message(3, T0 + 1, [3], 7).pairs()
    runs = runs_of(pairs + pairs[:1])
    assert [list(r.item_ids) for r in runs] == [[1, 2], [3], [1]]
    assert [r.vectors.shape for r in runs] == [(2, DIM), (1, DIM), (1, DIM)]


def test_a_vector_of_the_wrong_size_changes_nothing() -> None:
    """Every vector is decoded before any is counted: one corrupt pair leaves the state as
    it was (the message is refused whole), not half folded."""
    good = message(4, T0, [1, 2], 8).pairs()
    broken = PairEmbedding(4, 3, T0, OWN, "FLOAT32", DIM, b"\x00" * 5)
    state = AggregateState()
    with pytest.raises(VectorSizeError):
        RollingAggregator(24 * H, H).add(state, [*good, broken])
    assert state == AggregateState() and not state.buckets


def test_a_late_run_of_a_retired_version_counts_each_embedding_dropped() -> None:
    agg = RollingAggregator(24 * H, H)
    state = AggregateState()
    agg.add(state, message(5, T0 + 100, [1], 9))
    other = message(5, T0 + 200, [2], 10)
    agg.add(state, EmbeddingBatch("x", 5, T0 + 200, "fm-next", "FLOAT32", DIM, (2,), other.vectors))
    assert agg.add(state, message(5, T0 + 50, [3, 4, 5], 11)) is None
    assert agg.stale_dropped == 3
