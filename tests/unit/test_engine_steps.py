"""Speculator, verifier, embedder, neighbours: pure engine steps with stand-in models."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from schemas.records import PairProposal, RequestEvent
from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.embedder import Embedder
from streams.engine.history import UserHistory
from streams.engine.lookahead import Lookahead
from streams.engine.models import EngineModels
from streams.engine.neighbours import NeighbourIndex, UserRepresentations
from streams.engine.speculator import Speculator
from streams.engine.stages import build_stages
from streams.engine.verifier import Verifier
from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM
from tests.unit.test_derived_counts import remembered as _remembered

T0 = 1_700_000_000_000
MEMORY_MS = ENGINE_DEFAULTS.verifier.pair_memory_ms
H = 3_600_000


def req(cands: tuple[int, ...], t: int = T0, user: int = 1) -> RequestEvent:
    return RequestEvent(f"r{t}", user, t, "feed", cands)


def test_speculator_skips_fresh_pairs_and_caps_budget() -> None:
    spec = Speculator(replace(ENGINE_DEFAULTS.speculator, budget=2, refresh_after_ms=H))
    ledger = {10: T0 - 10}
    out = spec.propose(req((10, 11, 12, 13)), ledger, frozenset)
    assert [p.item_id for p in out] == [11, 12]
    assert all(
        p.score is None and p.strategy == "candidates" and p.event_time_ms == T0 for p in out
    )
    assert spec.stats.skipped_fresh == 1 and spec.stats.over_budget == 1


def test_speculator_rejects_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown speculation"):
        replace(ENGINE_DEFAULTS.speculator, strategies=("magic",))


def test_lookahead_proposes_covisited_then_trending() -> None:
    la = Lookahead()
    la.replace([], [(1, 1, T0), (2, 1, T0 + 10)])  # user A engaged with 1 then 2: co-visited
    for user in range(3):  # 9 trending: in three users' histories
        la.replace([], [(9, 0, T0 + 20 + user)])
    spec = Speculator(
        replace(
            ENGINE_DEFAULTS.speculator, strategies=("candidates", "lookahead"), lookahead_items=2
        ),
        la,
    )
    out = spec.propose(req((5,), T0 + 30), {}, frozenset, recent_positive_items=[1])
    assert [(p.item_id, p.strategy) for p in out] == [
        (5, "candidates"),
        (2, "lookahead"),
        (9, "lookahead"),
    ]


def test_choose_is_what_propose_proposes_without_the_objects() -> None:
    """The speculate step's path (items and strategies) and the proposals' agree, fresh skips,
    in-flight marks past the timeout and the budget included."""
    cfg = replace(ENGINE_DEFAULTS.speculator, budget=4, refresh_after_ms=H, in_flight_ms=60_000)
    ledger = {10: T0 - 10, 12: T0 - 120_000, 14: T0 - 2 * H}  # fresh, in flight too long, stale
    cands = (10, 11, 12, 10, 13, 14, 15, 16)
    a, b = Speculator(cfg), Speculator(cfg)
    items, strategies = a.choose(req(cands), ledger, frozenset)
    out = b.propose(req(cands), ledger, frozenset)
    assert items == [p.item_id for p in out] == [11, 12, 13, 14]
    assert strategies == [p.strategy for p in out]
    assert a.stats == b.stats and a.stats.skipped_fresh == 1 and a.stats.over_budget == 2


class _Scores:
    def __init__(self, scores: list[float]) -> None:
        self.scores = np.asarray(scores, np.float32)

    def score(self, u: np.ndarray, i: np.ndarray, t: np.ndarray) -> np.ndarray:
        return self.scores[: len(u)]


def props(n: int) -> list[PairProposal]:
    return [PairProposal("r", 1, 100 + k, T0, "candidates") for k in range(n)]


def test_verifier_top_fraction_keeps_best_in_original_order() -> None:
    v = Verifier(
        _Scores([0.1, 0.9, 0.5, 0.7]),
        replace(ENGINE_DEFAULTS.verifier, top_fraction=0.5, rank_by="vm"),
    )
    kept = v.verify_many([props(4)])[0]
    assert [p.item_id for p in kept] == [101, 103]
    assert kept[0].score == pytest.approx(0.9)
    assert v.stats.kept == 2 and v.stats.dropped_rank == 2 and v.stats.drop_rate == 0.5


def test_verifier_threshold_and_top_k_across_groups() -> None:
    v = Verifier(
        _Scores([0.9, 0.2, 0.8, 0.7, 0.6]),
        replace(ENGINE_DEFAULTS.verifier, threshold=0.5, top_k=1, top_fraction=None, rank_by="vm"),
    )
    a, b = v.verify_many([props(2), props(3)])
    assert [p.item_id for p in a] == [100] and [p.item_id for p in b] == [100]
    assert v.stats.dropped_threshold == 1 and v.stats.dropped_rank == 2


def test_verifier_drops_non_finite_scores_before_ranking() -> None:
    """A broken VM score (+inf ranks first, NaN anywhere) must not take a valid pair's slot."""
    v = Verifier(
        _Scores([0.1, float("inf"), 0.5, float("nan"), 0.7]),
        replace(ENGINE_DEFAULTS.verifier, top_fraction=0.4, rank_by="vm"),
    )
    kept = v.verify_many([props(5)])[0]
    assert [p.item_id for p in kept] == [102, 104]
    assert v.stats.dropped_nonfinite == 2 and v.stats.kept == 2 and v.stats.dropped_rank == 1
    first, second = v.select_many([props(3), props(2)])  # the same scores over two groups
    assert (first.nonfinite, second.nonfinite) == (1, 1)
    assert [p.item_id for p in first.kept] == [100, 102] and [p.item_id for p in second.kept] == [
        101
    ]


def test_embedder_builds_float16_records() -> None:
    fm = FakeFM(dim=8)
    out = Embedder(fm).embed(props(3), [UserHistory.empty()] * 3)
    assert [e.item_id for e in out] == [100, 101, 102]
    assert (
        out[0].dtype == "FLOAT16" and out[0].dim == 8 and out[0].model_version == fm.model_version
    )
    with pytest.raises(ValueError, match="histories"):
        Embedder(fm).embed(props(2), [])


def test_neighbour_index_exact_and_hnsw_agree() -> None:
    items = FakeItems(dim=8)
    reps = UserRepresentations(items)
    rng = np.random.default_rng(0)
    for u in range(300):
        reps.observe(u, rng.integers(0, 50, size=10).tolist(), T0)
    users = list(range(300))
    exact = NeighbourIndex(
        users, reps.get(users), reps, replace(ENGINE_DEFAULTS.neighbours, k=5, exact_max=10_000)
    )
    ann = NeighbourIndex(
        users, reps.get(users), reps, replace(ENGINE_DEFAULTS.neighbours, k=5, exact_max=10)
    )
    q = reps.get([0, 1, 2])
    for (ids_e, w_e), (ids_a, _) in zip(
        exact.query(q, 5, [0, 1, 2]), ann.query(q, 5, [0, 1, 2]), strict=True
    ):
        assert len(set(ids_e) & set(ids_a)) >= 4
        assert np.all(np.diff(w_e) <= 1e-6)  # best first
    assert 0 not in exact.query(q, 5, [0, 1, 2])[0][0]
    lists = exact.lists_for([0, 1], T0)
    assert [nl.user_id for nl in lists] == [0, 1] and len(lists[0].neighbours) == 5
    ids, w = exact.neighbours_for_items([1, 2, 3], 3, exclude_user=-1)
    assert len(ids) == 3 and np.all(w > 0)


def test_verifier_can_rank_by_the_recurrence_prior() -> None:
    """The verifier ranks by the recurrence inputs it is given (the speculate step attaches
    them to the proposals), never by reading the prior itself."""
    from streams.engine.recurrence import EMPTY_MEMORY, ItemPrior, RecurrenceInputs

    prior = ItemPrior(window_ms=MEMORY_MS)
    _remembered(prior, EMPTY_MEMORY, "other", [102, 103], T0)
    items = [p.item_id for p in props(4)]
    inputs = RecurrenceInputs(prior.raw_counts(items), np.zeros(4))
    scores = _Scores([0.9, 0.8, 0.1, 0.2])
    by_vm = Verifier(
        scores, replace(ENGINE_DEFAULTS.verifier, top_fraction=0.5, rank_by="vm")
    ).verify_many([props(4)], recurrence=[inputs])[0]
    by_prior = Verifier(
        scores, replace(ENGINE_DEFAULTS.verifier, top_fraction=0.5, rank_by="prior")
    ).verify_many([props(4)], recurrence=[inputs])[0]
    assert [p.item_id for p in by_vm] == [100, 101]
    assert [p.item_id for p in by_prior] == [102, 103]
    # a message without inputs ranks as if nothing recurred: the VM order
    no_inputs = Verifier(
        scores, replace(ENGINE_DEFAULTS.verifier, top_fraction=0.5, rank_by="prior")
    ).verify_many([props(4)], recurrence=[None])[0]
    assert [p.item_id for p in no_inputs] == [100, 101]
    with pytest.raises(ValueError, match="rank_by"):
        replace(ENGINE_DEFAULTS.verifier, rank_by="magic")


def test_proposals_carry_the_recurrence_inputs_as_of_their_request() -> None:
    """The speculate step attaches, per proposal, the prior's count and the pair count after
    counting the request's own list: what the verify step saw when it read the prior right
    after the speculate step (the simulator's order), whatever was counted since."""
    from schemas.codec import Codec
    from streams.engine.recurrence import EMPTY_MEMORY, ItemPrior
    from streams.engine.steps.speculate import speculate

    stages = build_stages(
        ENGINE_DEFAULTS.speculator,
        ENGINE_DEFAULTS.verifier,
        EngineModels(FakeFM(8), FakeVM(), FakeSolaris(), FakeItems(8)),
        ENGINE_DEFAULTS.aggregate_window_ms,
        ENGINE_DEFAULTS.aggregate_bucket_ms,
    )
    assert (
        isinstance(stages.prior, ItemPrior) and stages.pair_memory_ms == MEMORY_MS
    )  # recurrence: the default
    _, memory = speculate(
        RequestEvent("r0", 1, T0, "feed", (5, 6, 7)), {}, frozenset, [], EMPTY_MEMORY, stages
    )
    assert memory is not None
    batch, memory = speculate(
        RequestEvent("r1", 1, T0 + 10, "feed", (6, 7, 8)), {}, frozenset, [], memory, stages
    )
    assert batch is not None and memory is not None
    assert len(batch.prior_counts) == len(batch.item_ids)
    expected_pairs = memory.pair_counts(batch.item_ids, T0 + 10, MEMORY_MS)
    expected_prior = stages.prior.raw_counts(batch.item_ids)
    assert list(batch.pair_counts) == [int(c) for c in expected_pairs]
    assert list(batch.prior_counts) == expected_prior.tolist()
    lists = {5: 1, 6: 2, 7: 2, 8: 1}  # in how many of the user's two lists each item was
    assert all(lists[i] == c for i, c in zip(batch.item_ids, batch.pair_counts, strict=True))
    speculate(  # counted later
        RequestEvent("r2", 1, T0 + 20, "feed", (6, 9)), {}, frozenset, [], memory, stages
    )
    assert list(batch.pair_counts) == [int(c) for c in expected_pairs]  # the message is fixed
    assert Codec().decode(Codec().encode(batch)) == batch  # and travels in schema v2


def test_pair_memory_counts_the_users_recent_lists_within_the_memory_window() -> None:
    from streams.engine.recurrence import EMPTY_MEMORY, LISTS_PER_USER

    memory = EMPTY_MEMORY.remember("a", [1, 2, 3], T0).remember("b", [2, 3], T0 + 500)
    assert memory.pair_counts([1, 2, 3, 9], T0 + 500, MEMORY_MS).tolist() == [1.0, 2.0, 2.0, 0.0]
    # exactly MEMORY_MS old still counts; one ms more does not
    assert memory.pair_counts([1, 2], T0 + MEMORY_MS, MEMORY_MS).tolist() == [1.0, 2.0]
    assert memory.pair_counts([1, 2], T0 + MEMORY_MS + 1, MEMORY_MS).tolist() == [0.0, 1.0]
    # only the newest LISTS_PER_USER lists count
    for n in range(LISTS_PER_USER - 1):
        memory = memory.remember(f"c{n}", [4], T0 + 600 + n)
    assert memory.pair_counts([1, 2, 4], T0 + 700, MEMORY_MS).tolist() == [0.0, 1.0, 3.0]
    assert EMPTY_MEMORY.pair_counts([1], T0, MEMORY_MS).tolist() == [0.0]


def test_verifier_recurrence_ranking_prefers_the_users_own_recurring_items() -> None:
    from streams.engine.recurrence import EMPTY_MEMORY, ItemPrior, RecurrenceInputs

    prior = ItemPrior(window_ms=MEMORY_MS)
    _remembered(prior, EMPTY_MEMORY, "x0", [102, 103], T0 - 5)  # popular with someone else
    _remembered(prior, EMPTY_MEMORY, "y0", [102, 103], T0 - 4)
    memory = _remembered(prior, EMPTY_MEMORY, "r0", [100], T0 - 3)  # user 1 saw 100 before
    memory = _remembered(prior, memory, "r1", [100, 101, 102, 103], T0)  # the request verified
    items = [100, 101, 102, 103]
    inputs = RecurrenceInputs(prior.raw_counts(items), memory.pair_counts(items, T0, MEMORY_MS))
    v = Verifier(_Scores([0.1, 0.9, 0.5, 0.7]), replace(ENGINE_DEFAULTS.verifier, top_fraction=0.5))
    kept = v.verify_many([props(4)], recurrence=[inputs])[0]
    # 100: own list twice (2 + prior 0.67); 102/103: once (1 + prior 1.0) -> VM breaks the tie
    assert [p.item_id for p in kept] == [100, 103]


def test_refresh_clock_is_due_on_the_interval_and_on_population_growth() -> None:
    from streams.engine.neighbours import RefreshClock

    clock = RefreshClock(interval_ms=1_000, ttl_ms=5_000, growth_factor=2.0)
    assert clock.due(T0, population=0)  # never built
    assert clock.start(T0, population=0) == T0 - 5_000
    assert not clock.due(T0 + 1, population=0)
    assert clock.due(T0 + 1, population=1)  # the first user with an aggregate
    assert clock.start(T0 + 1, population=3) == T0
    assert not clock.due(T0 + 2, population=5)  # 5 < 2 x 3
    assert clock.due(T0 + 2, population=6)
    assert not clock.due(T0 + 1_000, population=3)  # one ms short of the interval
    assert clock.due(T0 + 1_001, population=3)
    assert not clock.due(T0 + 2)  # no population given: interval only


def test_refresh_clock_growth_factor_one_means_interval_only() -> None:
    from streams.engine.neighbours import RefreshClock

    clock = RefreshClock(interval_ms=1_000, ttl_ms=5_000, growth_factor=1.0)
    clock.start(T0, population=1)
    assert not clock.due(T0 + 999, population=1_000_000)
    assert clock.due(T0 + 1_000, population=1)
    with pytest.raises(ValueError, match="growth_factor"):
        RefreshClock(interval_ms=1_000, ttl_ms=5_000, growth_factor=0.5)


def test_foresight_scorer_counts_future_lookups_within_the_horizon() -> None:
    from streams.simulate.baselines import ForesightScorer

    seer = ForesightScorer.from_requests(
        [(1, T0, [10, 11]), (1, T0 + 500, [10]), (1, T0 + 1_000, [10, 12]), (2, T0, [10])],
        horizon_ms=1_000,
    )
    u = np.array([1, 1, 1, 2, 3], np.int64)
    i = np.array([10, 11, 12, 10, 10], np.int64)
    t = np.full(5, T0, np.int64)
    # (1,10): at T0+500 and T0+1000 (the horizon's end counts); the lookup at T0 itself does not
    assert seer.score(u, i, t).tolist() == [2.0, 0.0, 1.0, 0.0, 0.0]
    assert seer.score(u[:1], i[:1], np.array([T0 + 500], np.int64)).tolist() == [1.0]
    with pytest.raises(ValueError, match="item ids"):
        seer.score(u[:1], np.array([-1], np.int64), t[:1])
    shorter = seer.with_horizon(500)  # same index, nearer horizon; the original is unchanged
    assert shorter.score(u[:1], i[:1], t[:1]).tolist() == [1.0]
    assert seer.score(u[:1], i[:1], t[:1]).tolist() == [2.0]


def test_the_engine_history_does_not_load_onnxruntime() -> None:
    """Issue 23: layers one-way. The engine's history (the simulator's and the agents' state)
    needs only numpy; importing it used to load onnxruntime through models.runtime."""
    import subprocess
    import sys

    code = "import sys, streams.engine.history; print('onnxruntime' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
