"""The state tier (issue 22): the FM worker stores each verified request's user state, the
reader decodes it for the candidates without an exact pair, ahead of the aggregate.

Stand-in models (pure logic): a state is a function of the history, the decoder a function of
(item, state), so every served vector can be recomputed here and compared by value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from models.data.columns import iter_events
from models.data.synthetic import SyntheticConfig, generate
from schemas.records import ImpressionEvent, PairEmbedding, ProposalBatch, RequestEvent
from schemas.vectors import VectorDtype
from store.memory import InMemoryStore
from store.protocol import ReadBatch
from store.reader import FeatureReader
from store.state_slots import split_states
from store.tiers import SERVING_ORDER, Tier
from store.values import decode_vector, encode_state
from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.history import UserHistory
from streams.engine.models import EngineModels
from streams.engine.steps.embed import embed_input
from streams.engine.steps.state import computed_states, encode_states, state_rows, user_states
from streams.simulate.simulator import Simulator
from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM
from tests.unit.test_simulator import DIM as SIM_DIM
from tests.unit.test_simulator import config

T0 = 1_700_000_000_000
HOUR = 3_600_000
DIM = 4
WIDTH = 3


class FakeState:
    """state = (count, mean item id, sum of labels) of the history strictly before t;
    decode(item, state) = item-specific: [item * s0, s1, s2, item] / 1000."""

    width = WIDTH

    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim
        self.decoded = 0
        self.fail = False

    def states(self, event_time_ms: np.ndarray, histories: Sequence[UserHistory]) -> np.ndarray:
        out = np.zeros((len(histories), WIDTH), np.float32)
        for r, (t, h) in enumerate(zip(event_time_ms.tolist(), histories, strict=True)):
            keep = np.asarray(h.times_ms) < t
            items, labels = np.asarray(h.items)[keep], np.asarray(h.labels)[keep]
            out[r] = (len(items), items.mean() if len(items) else 0.0, labels.sum())
        return out

    def decode(self, item_ids: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.fail:
            raise RuntimeError("decoder down")
        self.decoded += len(item_ids)
        return decode_ref(item_ids, states, self.dim), np.zeros(len(item_ids), np.float32)


def decode_ref(item_ids: np.ndarray, states: np.ndarray, dim: int = DIM) -> np.ndarray:
    """[item * s0, s1, s2, item, 0, ...] / 1000, ``dim`` columns."""
    it = np.asarray(item_ids, np.float32)
    s = np.asarray(states, np.float32)
    out = np.zeros((len(it), dim), np.float32)
    out[:, :4] = np.stack([it * s[:, 0], s[:, 1], s[:, 2], it], axis=1) / 1000.0
    return out


def reader(store: InMemoryStore, decoder: FakeState | None, **kw: object) -> FeatureReader:
    cfg = replace(
        ENGINE_DEFAULTS.reader,
        dim=DIM,
        pair_ttl_ms=HOUR,
        aggregate_ttl_ms=HOUR,
        state_ttl_ms=2 * HOUR,
        **kw,  # type: ignore[arg-type]
    )
    return FeatureReader(store, cfg, states=decoder)


def state_value(t: int, state: Sequence[float], version: str = "fm") -> bytes:
    return encode_state(t, version, np.asarray(state, np.float32), VectorDtype.FLOAT16)


@pytest.fixture()
def store() -> InMemoryStore:
    return InMemoryStore(clock_ms=lambda: T0)


def test_serving_order_puts_the_state_right_after_the_exact_pair() -> None:
    assert SERVING_ORDER[:3] == (Tier.EXACT, Tier.STATE, Tier.AGGREGATE)
    assert set(SERVING_ORDER) == set(Tier)


def test_state_is_decoded_for_every_candidate_without_an_exact_pair(store: InMemoryStore) -> None:
    store.write_pairs([PairEmbedding.from_array(1, 10, T0, "fm", np.full(DIM, 0.5))], HOUR)
    from schemas.records import UserAggregate

    store.write_aggregates(
        [UserAggregate.from_array(1, T0, HOUR, 2, "fm", np.full(DIM, 0.25))], HOUR
    )
    store.write_states({1: state_value(T0, (2.0, 30.0, 1.0))}, HOUR)
    dec = FakeState()
    vectors, tiers, ages = reader(store, dec).lookup(1, [10, 11, 12], T0 + 1000)
    assert tiers.tolist() == [Tier.EXACT, Tier.STATE, Tier.STATE]
    assert ages.tolist() == [1000, 1000, 1000]
    np.testing.assert_allclose(vectors[0], np.full(DIM, 0.5), rtol=1e-3)
    want = decode_ref(np.array([11, 12]), np.tile([2.0, 30.0, 1.0], (2, 1)))
    np.testing.assert_allclose(vectors[1:], want, rtol=1e-6)
    assert dec.decoded == 1 + 2  # the warm-up row, then the two; the exact one is not decoded
    # without a decoder the same store serves the aggregate (the state key is not even read)
    _, tiers, _ = reader(store, None).lookup(1, [10, 11], T0 + 1000)
    assert tiers.tolist() == [Tier.EXACT, Tier.AGGREGATE]


def test_state_freshness_version_and_width_are_checked(store: InMemoryStore) -> None:
    store.write_states({1: state_value(T0, (1.0, 2.0, 3.0))}, 10 * HOUR)
    dec = FakeState()
    r = reader(store, dec)
    assert r.lookup(1, [5], T0).tiers[0] == Tier.MISSING  # the request that wrote it
    assert r.lookup(1, [5], T0 + 2 * HOUR).tiers[0] == Tier.STATE  # TTL inclusive
    assert r.lookup(1, [5], T0 + 2 * HOUR + 1).tiers[0] == Tier.MISSING
    other = reader(store, dec, version_tag=12345)
    assert other.lookup(1, [5], T0 + 1).tiers[0] == Tier.MISSING  # another model's state
    store.write_states({2: state_value(T0, (1.0, 2.0))}, HOUR)  # width 2, decoder wants 3
    assert r.lookup(2, [5], T0 + 1).tiers[0] == Tier.MISSING
    assert r.stats.corrupt_values == 1


def test_a_failing_decoder_falls_through_to_the_aggregate_and_is_counted(
    store: InMemoryStore,
) -> None:
    from schemas.records import UserAggregate

    store.write_aggregates(
        [UserAggregate.from_array(1, T0, HOUR, 2, "fm", np.full(DIM, 0.25))], HOUR
    )
    store.write_states({1: state_value(T0, (1.0, 2.0, 3.0))}, HOUR)
    dec = FakeState()
    dec.fail = True
    r = reader(store, dec)
    vectors, tiers, _ = r.lookup(1, [5, 6], T0 + 1)
    assert tiers.tolist() == [Tier.AGGREGATE, Tier.AGGREGATE]
    np.testing.assert_allclose(vectors, np.full((2, DIM), 0.25))
    assert r.stats.state_decode_errors == 1 and r.stats.internal_errors == 0


def test_an_older_state_never_replaces_a_newer_one(store: InMemoryStore) -> None:
    store.write_states({1: state_value(T0 + 10, (1.0, 1.0, 1.0))}, HOUR)
    store.write_states({1: state_value(T0, (9.0, 9.0, 9.0))}, HOUR)
    _, tiers, ages = reader(store, FakeState()).lookup(1, [5], T0 + 20)
    assert tiers[0] == Tier.STATE and ages[0] == 10
    assert store.stale_skipped == 1


def test_a_state_stored_at_the_requests_own_time_leaves_the_previous_one_served(
    store: InMemoryStore,
) -> None:
    """Live, the pipeline may store request r's state before the ranker reads for r: the
    lookup must still serve the state of the user's previous request, as the simulator
    (which reads before it writes) does."""
    store.write_states({1: state_value(T0, (1.0, 10.0, 0.0))}, HOUR)  # previous request
    store.write_states({1: state_value(T0 + 500, (2.0, 20.0, 1.0))}, HOUR)  # this request
    vectors, tiers, ages = reader(store, FakeState()).lookup(1, [7], T0 + 500)
    assert tiers[0] == Tier.STATE and ages[0] == 500
    np.testing.assert_allclose(vectors, decode_ref(np.array([7]), np.array([[1.0, 10.0, 0.0]])))
    # a later request serves the newest
    vectors, _, ages = reader(store, FakeState()).lookup(1, [7], T0 + 600)
    assert ages[0] == 100
    np.testing.assert_allclose(vectors, decode_ref(np.array([7]), np.array([[2.0, 20.0, 1.0]])))


def _batch(user: int, t: int, hist: tuple[list[int], list[int], list[int]]) -> ProposalBatch:
    items, labels, times = hist
    return ProposalBatch(
        f"r{user}-{t}",
        user,
        t,
        2,
        (7, 8),
        ("recent", "recent"),
        (),
        tuple(items),
        tuple(labels),
        tuple(times),
    )


def test_state_step_keeps_each_users_two_newest_messages_and_refuses_nonfinite_states() -> None:
    first = embed_input(None, _batch(1, 50, ([], [], [])))
    a = embed_input(None, _batch(1, 100, ([5], [1], [50])))
    b = embed_input(None, _batch(1, 200, ([5, 6], [1, 0], [50, 150])))
    c = embed_input(None, _batch(2, 150, ([], [], [])))
    rows = state_rows([b, first, a, c])
    assert rows.users == [1, 1, 2] and rows.times.tolist() == [100, 200, 150]  # older first
    model = FakeState()
    got = user_states([b, first, a, c], model.states, "fm", VectorDtype.FLOAT16)
    assert got.nonfinite == 0
    assert got.values == [
        (1, state_value(100, (1.0, 5.0, 1.0))),
        (1, state_value(200, (2.0, 5.5, 1.0))),
        (2, state_value(150, (0.0, 0.0, 0.0))),
    ]
    huge = encode_states(
        rows, np.array([[1, 2, 3], [1e6, 0, 0], [1, 2, 3]], np.float32), "fm", VectorDtype.FLOAT16
    )
    assert [u for u, _ in huge.values] == [1, 2] and huge.nonfinite == 1  # 1e6 overflows f16


def test_what_is_stored_does_not_depend_on_how_messages_were_grouped() -> None:
    """The live FM worker's micro-batches are not the simulator's: the state key must hold the
    same two states whichever way a user's messages were split into calls."""
    msgs = [
        embed_input(None, _batch(1, T0 + t, ([5, 6][:k], [1, 0][:k], [T0 + 10, T0 + 20][:k])))
        for k, t in enumerate((50, 100, 200, 300))
    ]
    held = []
    for groups in ([msgs], [msgs[:1], msgs[1:]], [msgs[:3], msgs[3:]], [[m] for m in msgs]):
        store = InMemoryStore(clock_ms=lambda: T0)
        for group in groups:
            store.write_states(
                user_states(group, FakeState().states, "fm", VectorDtype.FLOAT16).values, HOUR
            )
        held.append(store.read(ReadBatch(states=[1]), 100).states[0])
    assert held[0] is not None and all(h == held[0] for h in held)
    assert [decode_vector(v).event_time_ms for v in split_states(held[0])] == [T0 + 300, T0 + 200]


def test_simulator_serves_the_decoded_state_of_the_users_previous_verified_request() -> None:
    """Values, not counts: every state-tier vector the simulator served equals the decoder
    applied to the state recomputed here from the user's history before an earlier request."""
    traffic = generate(
        SyntheticConfig(n_users=60, n_items=400, days=3.0, k=20, seed=3, sessions_per_day=0.35)
    )
    events: list[RequestEvent | ImpressionEvent] = list(
        iter_events(traffic.requests, traffic.impressions)
    )
    state = FakeState(SIM_DIM)
    models = EngineModels(FakeFM(SIM_DIM), FakeVM(), FakeSolaris(), FakeItems(SIM_DIM), state)
    cfg = dataclasses.replace(config(use_neighbours=False), test_start_ms=0)
    sim = Simulator(cfg, models)
    sim.run(events)
    tiers = np.asarray(sim.eval.tiers)
    assert (tiers == Tier.STATE).sum() > 0
    assert (tiers == Tier.AGGREGATE).sum() == 0  # a user with an aggregate has a state first
    # every candidate state-served was decodable from one of the user's earlier states
    history: dict[int, list[tuple[int, int, int]]] = {}
    request_times: dict[int, list[int]] = {}
    for e in events:
        if isinstance(e, RequestEvent):
            request_times.setdefault(e.user_id, []).append(e.event_time_ms)
        else:
            history.setdefault(e.user_id, []).append((e.item_id, e.label, e.event_time_ms))
    ev = sim.eval
    checked = 0
    for j in np.flatnonzero(tiers == Tier.STATE)[:50]:
        u, item, t = int(ev.users[j]), int(ev.items[j]), int(ev.times[j])
        got = np.asarray(ev.vectors[j])
        candidates = []
        for t_prev in [x for x in request_times[u] if x < t]:
            h = [x for x in history.get(u, []) if x[2] < t_prev][-cfg.history_len :]
            s = FakeState().states(
                np.array([t_prev]),
                [UserHistory.of([x[0] for x in h], [x[1] for x in h], [x[2] for x in h])],
            )
            candidates.append(decode_ref(np.array([item]), s.astype(np.float16), SIM_DIM)[0])
        assert any(np.allclose(got, c, rtol=1e-5, atol=1e-6) for c in candidates), (u, item, t)
        checked += 1
    assert checked > 10


def test_states_the_fm_run_computed_equal_a_second_run_of_the_state_model() -> None:
    """The FM worker stores the states its split FM run already computed (one history encoding
    per message): the same rows and bytes as running the state model again over the rows."""
    msgs = [
        embed_input(None, _batch(u, T0 + t, ([5, 6][:k], [1, 0][:k], [T0 + 10, T0 + 20][:k])))
        for u, k, t in ((1, 2, 300), (2, 1, 150), (1, 0, 50), (1, 1, 200), (2, 2, 400))
    ]
    model = FakeState()
    per_message = model.states(
        np.array([m.batch.event_time_ms for m in msgs], np.int64), [m.history for m in msgs]
    )
    got = computed_states(msgs, per_message, "fm", VectorDtype.FLOAT16)
    assert got == user_states(msgs, model.states, "fm", VectorDtype.FLOAT16)
    assert [u for u, _ in got.values] == [1, 1, 2, 2]  # each user's two newest, older first
    with pytest.raises(ValueError, match="4 states for 5 messages"):
        computed_states(msgs, per_message[:4], "fm", VectorDtype.FLOAT16)
