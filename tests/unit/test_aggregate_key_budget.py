"""A user's aggregate state stays within its key budget however much the user sends: the table
value (and its changelog message) cannot outgrow Kafka's 1 MB limit and crash-loop the worker."""

from __future__ import annotations

import json

import numpy as np
import pytest

from schemas.records import PairEmbedding
from schemas.vectors import VectorDtype
from streams.engine.aggregator import AggregateState, RollingAggregator

H = 3_600_000
T0 = 1_704_067_200_000  # a bucket boundary
KAFKA_LIMIT = 1_000_000  # librdkafka's default message.max.bytes


def embs(items: range, t: int, value: float = 1.0) -> list[PairEmbedding]:
    vec = np.full(4, value, np.float16).tobytes()
    return [PairEmbedding(1, i, t, "v1", VectorDtype.FLOAT16.value, 4, vec) for i in items]


def heavy_state(
    agg: RollingAggregator, keys: int = 48_000, per_hour: int = 2_000
) -> AggregateState:
    """A bot's day: ``keys`` distinct pairs over 24 hourly buckets."""
    state = AggregateState()
    for h in range(keys // per_hour):
        agg.add(state, embs(range(h * per_hour, (h + 1) * per_hour), T0 + h * H))
    return state


def size(state: AggregateState) -> int:
    return len(json.dumps(state.to_json()).encode())


def test_without_a_budget_a_heavy_day_outgrows_a_kafka_message() -> None:
    """The failure it prevents: 48 k keys make a value over 1 MB (the changelog send failed
    with MSG_SIZE_TOO_LARGE, an infrastructure error: retried, then exit 75, for ever)."""
    assert size(heavy_state(RollingAggregator(24 * H, H))) > KAFKA_LIMIT


def test_a_budget_keeps_the_value_small_and_the_aggregate_whole() -> None:
    agg = RollingAggregator(24 * H, H, max_keys=20_000)
    state = heavy_state(agg)
    out = agg.add(state, embs(range(10**6, 10**6 + 1), T0 + 23 * H + 1))
    assert out is not None and out.count == 48_001  # every pair still counted once
    assert state.seen.count() <= 20_000 and size(state) < KAFKA_LIMIT / 2
    assert agg.keys_dropped == 48_001 - state.seen.count()
    restored = AggregateState.from_json(state.to_json())  # the budget survives the table
    assert restored.sealed == state.sealed and restored.seen.count() == state.seen.count()


def test_late_embeddings_into_a_sealed_bucket_are_dropped_and_counted() -> None:
    agg = RollingAggregator(24 * H, H, max_keys=20_000)
    state = heavy_state(agg)
    assert T0 in state.sealed  # the oldest bucket lost its keys first
    before = agg.add(state, embs(range(900_000, 900_001), T0 + 23 * H + 5))
    assert before is not None
    assert agg.add(state, embs(range(5), T0 + 1)) is None  # a redelivery, or not: refused
    assert agg.sealed_dropped == 5
    # in a bucket that kept its keys a redelivery is still recognised, a new pair counted
    assert agg.add(state, embs(range(46_000, 46_001), T0 + 23 * H)) is None
    newer = agg.add(state, embs(range(800_000, 800_001), T0 + 23 * H))
    assert newer is not None and newer.count == before.count + 1


@pytest.mark.parametrize("max_keys", [0, 10**9])
def test_no_or_a_large_budget_changes_nothing(max_keys: int) -> None:
    plain, capped = RollingAggregator(24 * H, H), RollingAggregator(24 * H, H, max_keys=max_keys)
    a, b = heavy_state(plain, 6_000), heavy_state(capped, 6_000)
    assert a.to_json() == b.to_json() and not b.sealed
