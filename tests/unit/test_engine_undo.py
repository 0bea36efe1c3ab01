"""A batch run again after an infrastructure error starts from the same in-process state:
the undo log (:mod:`streams.engine.undo`) and the speculate step under it."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from schemas.records import ProposalBatch, RequestEvent
from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.lookahead import DecayedCounter
from streams.engine.models import EngineModels
from streams.engine.recurrence import RecurrencePrior
from streams.engine.stages import Stages, build_stages, undone_on_error
from streams.engine.steps.speculate import observe_representation, speculate
from streams.engine.undo import UndoLog
from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM

T0 = 1_700_000_000_000
HORIZON_MS = 7 * 86_400_000


class DeliveryFailed(Exception):
    """Stands for the infrastructure error after which the live driver reruns a batch."""


def test_rollback_restores_changed_added_and_deleted_entries_and_attributes() -> None:
    class Holder:
        scores: dict[int, int]

    mapping: dict[int, object] = {1: "a", 2: deque([1], maxlen=3)}
    holder = Holder()
    holder.scores = {7: 1}
    undo = UndoLog()
    undo.entry(mapping, 1)
    mapping[1] = "b"
    undo.entry(mapping, 1)  # a second change of the same entry keeps the first record
    mapping[1] = "c"
    undo.entry(mapping, 3)
    mapping[3] = "new"
    undo.entry(mapping, 2, copy=lambda q: deque(q, maxlen=q.maxlen))
    mapping[2].append(2)  # type: ignore[attr-defined]  # changed in place
    undo.attribute(holder, "scores")
    holder.scores = {}
    assert len(undo) == 4
    undo.rollback()
    assert mapping == {1: "a", 2: deque([1], maxlen=3)} and holder.scores == {7: 1}
    assert len(undo) == 0


def test_a_decayed_counter_rolls_back_across_a_rebase_and_a_prune() -> None:
    counter = DecayedCounter(half_life_ms=1)
    counter.add(1, T0)
    before = dict(counter._score), counter._t0
    undo = UndoLog()
    counter.undo = undo
    counter.add(1, T0 + 10)
    counter.add(2, T0 + 1_000)  # 1,000 half-lives later: the scores are rebased
    counter.add(2, T0 + 1_001)
    assert counter._t0 != before[1]
    counter._prune()
    undo.rollback()
    assert (dict(counter._score), counter._t0) == before


def _stages() -> Stages:
    return build_stages(
        ENGINE_DEFAULTS.speculator,
        ENGINE_DEFAULTS.verifier,
        EngineModels(FakeFM(8), FakeVM(), FakeSolaris(), FakeItems(8)),
        ENGINE_DEFAULTS.aggregate_window_ms,
        ENGINE_DEFAULTS.aggregate_bucket_ms,
    )


def _requests() -> list[RequestEvent]:
    rng = np.random.default_rng(3)
    return [
        RequestEvent(
            f"r{i}",
            int(rng.integers(1, 4)),
            T0 + 1_000 * i,
            "feed",
            tuple(int(x) for x in rng.choice(40, 12, replace=False)),
        )
        for i in range(30)
    ]


def _batch(stages: Stages, requests: list[RequestEvent]) -> list[ProposalBatch | None]:
    """The requests agent's per-request work on the in-process state (tables left out: the
    live driver writes them only after delivery)."""
    out = []
    for rec in requests:
        out.append(speculate(rec, {}, frozenset, [], stages))
        assert stages.reps is not None
        observe_representation(stages.reps, rec, None, HORIZON_MS)
    return out


def _state(stages: Stages) -> tuple[object, ...]:
    prior, reps = stages.prior, stages.reps
    assert isinstance(prior, RecurrencePrior) and reps is not None
    lists = {u: [(t, a.tolist()) for t, a in q] for u, q in prior._lists.items()}
    vectors = {u: reps.vector(u).tolist() for u in sorted(reps._vec)}
    return dict(prior._counts._score), lists, prior._observed, vectors, dict(reps._seen_at)


@pytest.mark.parametrize("fail_after", [30, 17])
def test_a_batch_run_again_after_an_error_gives_what_one_clean_run_gives(fail_after: int) -> None:
    """The first try of the second batch fails (after all of it, or part way through), the
    driver runs it again: the proposals (with the recurrence inputs the verify step ranks by)
    and the prior and representations afterwards are those of a run without the failure."""
    requests = _requests()
    first, second = requests[:12], requests[12:]
    clean = _stages()
    _batch(clean, first)
    expected = _batch(clean, second)

    faulty = _stages()
    with undone_on_error(faulty):
        _batch(faulty, first)
    with pytest.raises(DeliveryFailed), undone_on_error(faulty):
        _batch(faulty, second[: fail_after - 12])
        raise DeliveryFailed
    with undone_on_error(faulty):
        again = _batch(faulty, second)
    assert again == expected
    assert _state(faulty) == _state(clean)


def test_the_undo_log_is_off_outside_a_batch() -> None:
    stages = _stages()
    with undone_on_error(stages) as undo:
        _batch(stages, _requests()[:3])
        assert len(undo) > 0
    assert stages.prior is not None and stages.prior._undo is None
    assert stages.prior._counts.undo is None and stages.reps is not None
    assert stages.reps._undo is None


def test_request_step_is_speculate_then_the_representation_as_both_drivers_ran_them() -> None:
    """Both drivers call :func:`request_step`; it must give what the two rules give in that
    order (proposals with their recurrence inputs, then the representation to persist)."""
    from streams.engine.steps.speculate import SavedRep, request_step

    one, two = _stages(), _stages()
    saved: dict[int, SavedRep] = {}
    for rec in _requests():
        want = speculate(rec, {}, frozenset, [], one)
        assert one.reps is not None
        want_rep = observe_representation(one.reps, rec, saved.get(rec.user_id), HORIZON_MS)
        got = request_step(
            rec, {}, frozenset, [], lambda u=rec.user_id: saved.get(u), two, HORIZON_MS
        )
        assert got.proposals == want and got.rep == want_rep and got.foreign_resets == 0
        if got.rep is not None:
            saved[rec.user_id] = got.rep
    assert _state(one) == _state(two)


def test_request_step_without_a_neighbour_tier_never_loads_a_representation() -> None:
    from dataclasses import replace

    from streams.engine.steps.speculate import request_step

    stages = replace(_stages(), reps=None)

    def never() -> None:
        raise AssertionError("loaded a representation with no neighbour tier")

    rec = _requests()[0]
    got = request_step(rec, {}, frozenset, [], never, stages, HORIZON_MS)
    assert got.rep is None and got.proposals == speculate(rec, {}, frozenset, [], _stages())
