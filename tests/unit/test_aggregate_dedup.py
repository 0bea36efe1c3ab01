"""A redelivered embedding is never counted twice, however far the user's state has moved."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import PairEmbedding
from schemas.vectors import VectorDtype
from streams.engine.aggregator import AggregateState, RollingAggregator

H = 3_600_000
T0 = 1_704_067_200_000  # a bucket boundary


def emb(item: int, t: int, value: float) -> PairEmbedding:
    vec = np.full(4, value, np.float16).tobytes()
    return PairEmbedding(1, item, t, "v1", VectorDtype.FLOAT16.value, 4, vec)


def test_redelivery_after_state_moved_a_window_ahead_is_not_counted_twice() -> None:
    agg = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    first = emb(10, T0 + 10 * 60_000, 1.0)  # 00:10, in the bucket [00:00, 01:00)
    agg.add(state, [first])
    # state moves to 00:30 the next day: horizon 00:30 > 00:10, but the bucket still overlaps
    late = agg.add(state, [emb(11, T0 + 24 * H + 30 * 60_000, 3.0)])
    assert late is not None and late.count == 2 and late.array()[0] == pytest.approx(2.0)
    again = agg.add(state, [first])  # redelivered
    assert again is None  # nothing new: the same aggregate as before stands
    last = agg.add(state, [emb(12, T0 + 24 * H + 40 * 60_000, 2.0)])
    assert last is not None and last.count == 3
    assert last.array()[0] == pytest.approx(2.0)  # (1 + 3 + 2) / 3


def test_embedding_of_an_evicted_bucket_is_ignored_and_state_survives_json() -> None:
    agg = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    agg.add(state, [emb(10, T0 + 10 * 60_000, 1.0)])
    agg.add(state, [emb(11, T0 + 26 * H, 3.0)])  # the 00:00 bucket has left the window
    state = AggregateState.from_json(state.to_json())
    assert agg.add(state, [emb(10, T0 + 10 * 60_000, 1.0)]) is None
    out = agg.add(state, [emb(12, T0 + 26 * H + 1, 5.0)])
    assert out is not None and out.count == 2 and out.array()[0] == pytest.approx(4.0)


def test_embedding_of_another_size_is_refused_with_a_clear_error() -> None:
    agg = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    agg.add(state, [emb(10, T0, 1.0)])
    wide = PairEmbedding(1, 11, T0 + 1, "v1", VectorDtype.FLOAT16.value, 8, bytes(16))
    with pytest.raises(ValueError, match="dim 8 for user 1's 4-dim aggregate"):
        agg.add(state, [wide])


def test_dedup_entries_are_exactly_those_of_live_buckets_after_every_add() -> None:
    """The rebuild of ``seen`` is skipped when no bucket expired; after every add (random
    times, redeliveries, jumps past the window) it must still hold exactly the entries whose
    bucket is kept, and the aggregates must match a fresh fold of the kept buckets."""
    rng = np.random.default_rng(11)
    agg = RollingAggregator(window_ms=6 * H, bucket_ms=H)
    state = AggregateState()
    sent: list[PairEmbedding] = []
    t = T0
    for n in range(400):
        t += int(rng.integers(0, 20 * 60_000 if n % 60 else 8 * H))
        late = t - int(rng.integers(0, 7 * H))  # some land in expired buckets
        batch = [emb(int(rng.integers(50)), int(rng.choice([t, late])), float(n % 5))]
        if sent and rng.random() < 0.2:
            batch.append(sent[int(rng.integers(len(sent)))])  # a redelivery
        agg.add(state, batch)
        sent += batch
        starts = set(state.buckets)
        assert {(i, s) for i, s in state.seen if s - s % H not in starts} == set(), n
        assert sum(c for c, _ in state.buckets.values()) == len(state.seen), n
