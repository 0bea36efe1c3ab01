"""The aggregate step (streams.engine.steps.aggregate): one batch in, states and aggregates
out, a message it cannot process refused alone with its user's state untouched."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import PairEmbedding
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.steps.aggregate import aggregate_step

T0 = 1_700_000_000_000
H = 3_600_000
DIM = 4
OWN = "fm-own"


def emb(
    user: int, item: int, t: int, x: float, dim: int = DIM, version: str = OWN
) -> PairEmbedding:
    return PairEmbedding.from_array(user, item, t, version, np.full(dim, x, np.float32))


def aggregator() -> RollingAggregator:
    return RollingAggregator(24 * H, H, own=(OWN, DIM))


def test_a_batch_equals_the_aggregator_message_by_message() -> None:
    batch = [
        [emb(1, 10, T0, 1.0), emb(1, 11, T0, 3.0)],
        [emb(2, 20, T0 + 5, 5.0)],
        [emb(1, 12, T0 + 9, 8.0)],
    ]
    loads: list[int] = []

    def load(user: int) -> AggregateState:
        loads.append(user)
        return AggregateState()

    got = aggregate_step(batch, load, aggregator())
    assert loads == [1, 2] and list(got.states) == [1, 2]  # one load per user
    assert not got.refused and got.stale_dropped == 0
    ref, states = aggregator(), {1: AggregateState(), 2: AggregateState()}
    want = {}
    for msg in batch:
        want[msg[0].user_id] = ref.add(states[msg[0].user_id], msg)
    assert got.aggregates.keys() == want.keys()
    for user, agg in got.aggregates.items():
        assert (agg.count, agg.event_time_ms) == (want[user].count, want[user].event_time_ms)
        np.testing.assert_array_equal(agg.array(), want[user].array())
    np.testing.assert_allclose(got.aggregates[1].array(), 4.0)  # (1 + 3 + 8) / 3


def test_a_bad_message_is_refused_alone_and_leaves_its_users_state_untouched() -> None:
    state = AggregateState()
    batch = [
        [emb(1, 10, T0, 1.0)],
        [emb(1, 11, T0 + 1, 2.0), emb(1, 12, T0 + 1, 2.0, dim=2 * DIM, version="fm-next")],
        [emb(1, 13, T0 + 2, 4.0, dim=2 * DIM)],  # the own FM's version, another width
        [emb(1, 14, T0 + 3, 3.0)],
    ]
    got = aggregate_step(batch, lambda _: state, aggregator())
    assert [i for i, _ in got.refused] == [1, 2]
    assert "mixes" in str(got.refused[0][1]) and "whose FM outputs" in str(got.refused[1][1])
    assert state.seen == {(10, T0), (14, T0 + 3)}  # nothing of the refused messages
    np.testing.assert_allclose(got.aggregates[1].array(), 2.0)
    assert got.aggregates[1].count == 2


def test_late_embeddings_of_a_retired_version_are_counted_per_batch() -> None:
    agg = aggregator()
    state = AggregateState()
    aggregate_step([[emb(1, 10, T0 + 100, 1.0, version="a")]], lambda _: state, agg)
    aggregate_step([[emb(1, 11, T0 + 50, 1.0, version="b")]], lambda _: state, agg)
    got = aggregate_step([[emb(1, 12, T0 + 60, 1.0, version="a")]], lambda _: state, agg)
    assert got.stale_dropped == 1 and not got.aggregates and not got.refused


def test_a_user_with_only_refused_messages_has_no_state_to_save() -> None:
    """Saving it would write a table entry (and a changelog message) for nothing."""
    batch = [[emb(5, 10, T0, 1.0, dim=2 * DIM)], [emb(6, 11, T0, 1.0)]]
    got = aggregate_step(batch, lambda _: AggregateState(), aggregator())
    assert list(got.states) == [6] and [i for i, _ in got.refused] == [0]


def test_only_the_errors_asked_for_are_isolated() -> None:
    """The live agent isolates any error of one message's fold; the simulator only data
    errors (a bug there must stop the run)."""

    class Broken(RollingAggregator):
        def add(self, state, embeddings):  # type: ignore[no-untyped-def]
            if embeddings[0].item_id == 13:
                raise RuntimeError("bug")
            return super().add(state, embeddings)

    broken = Broken(24 * H, H, own=(OWN, DIM))
    batch = [[emb(1, 13, T0, 1.0)], [emb(2, 14, T0, 1.0)]]
    got = aggregate_step(batch, lambda _: AggregateState(), broken, isolate=(Exception,))
    assert [i for i, _ in got.refused] == [0] and list(got.aggregates) == [2]
    with pytest.raises(RuntimeError):
        aggregate_step(batch, lambda _: AggregateState(), broken)
