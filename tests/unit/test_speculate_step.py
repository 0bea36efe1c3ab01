"""The batched speculate step (:func:`streams.engine.steps.speculate.speculate_step`): one batch
gives what its requests give one at a time, each user's state loaded once, a refused request
alone and persisting nothing."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from schemas.records import RequestEvent
from streams.engine.errors import StepError
from streams.engine.recurrence import EMPTY_MEMORY, PairMemory
from streams.engine.stages import Stages, undone_on_error
from streams.engine.steps import speculate as speculate_steps
from streams.engine.steps.speculate import (
    SavedRep,
    SpeculateInputs,
    SpeculateResult,
    speculate_step,
)
from tests.unit.test_engine_undo import HORIZON_MS, _requests, _stages, _state


class Stored:
    """A driver's stored state: dicts, and a count of the loads per part and user."""

    def __init__(self) -> None:
        self.reps: dict[int, SavedRep] = {}
        self.memories: dict[int, PairMemory] = {}
        self.loads: Counter[tuple[str, int]] = Counter()

    def inputs(self) -> SpeculateInputs:
        def counted(part: str, load: Callable[[int], Any]) -> Callable[[int], Any]:
            def read(user: int) -> Any:
                self.loads[part, user] += 1
                return load(user)

            return read

        return SpeculateInputs(
            counted("ledger", lambda _: {}),
            counted("confirmed", lambda _: frozenset()),
            counted("entries", lambda _: []),
            counted("rep", self.reps.get),
            counted("memory", lambda u: self.memories.get(u, EMPTY_MEMORY)),
        )

    def save(self, result: SpeculateResult) -> None:
        self.reps.update(result.reps)
        self.memories.update(result.memories)


def _one_at_a_time(stages: Stages, requests: list[RequestEvent], stored: Stored) -> list[Any]:
    """The simulator's way: every request a batch of one, its state saved before the next."""
    out = []
    for rec in requests:
        result = speculate_step([rec], stored.inputs(), stages, HORIZON_MS)
        stored.save(result)
        out.append(result.proposals[0][1] if result.proposals else None)
    return out


def test_one_batch_gives_what_its_requests_give_one_at_a_time() -> None:
    """Proposals (with the pair counts the verify step ranks by), representations, pair
    memories and the item prior: a user's later requests in the batch see its earlier ones."""
    requests = _requests()
    one, one_stored = _stages(), Stored()
    want = _one_at_a_time(one, requests, one_stored)
    batched, stored = _stages(), Stored()
    result = speculate_step(requests, stored.inputs(), batched, HORIZON_MS)
    stored.save(result)
    got: list[Any] = [None] * len(requests)
    for index, batch in result.proposals:
        got[index] = batch
    assert sum(b is not None for b in want) > 10
    assert len({b.user_id for b in want if b is not None}) == 3  # users interleave in the batch
    assert got == want
    assert any(sum(b.pair_counts) for b in want if b is not None)  # memories carried along
    assert stored.reps == one_stored.reps and stored.memories == one_stored.memories
    assert _state(batched, stored.memories) == _state(one, one_stored.memories)
    assert result.strategies == Counter(s for b in want if b is not None for s in b.strategies)
    last = {rec.user_id: i for i, rec in enumerate(requests)}
    assert result.changed_at == last  # every request changed its user's memory


def test_each_users_state_is_loaded_at_most_once_per_batch() -> None:
    requests = _requests()
    stored = Stored()
    speculate_step(requests, stored.inputs(), _stages(), HORIZON_MS)
    users = {rec.user_id for rec in requests}
    assert stored.loads and max(stored.loads.values()) == 1
    assert {u for part, u in stored.loads if part == "memory"} == users


@pytest.mark.parametrize("isolate", [(StepError,), (Exception,)])
def test_a_refused_request_is_alone_and_persists_nothing(
    isolate: tuple[type[Exception], ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poisoned request is reported with its index; its user's other requests go on from
    the state before it, as in a run without it."""
    requests = _requests()
    poisoned = 7
    real = speculate_steps.request_step

    def failing(rec: RequestEvent, *args: Any) -> Any:
        if rec.request_id == requests[poisoned].request_id:
            raise StepError("a request the step cannot process")
        return real(rec, *args)

    clean, clean_stored = _stages(), Stored()
    want = speculate_step(
        requests[:poisoned] + requests[poisoned + 1 :], clean_stored.inputs(), clean, HORIZON_MS
    )
    monkeypatch.setattr(speculate_steps, "request_step", failing)
    stored = Stored()
    got = speculate_step(requests, stored.inputs(), _stages(), HORIZON_MS, isolate)
    (refused,) = got.refused
    assert refused[0] == poisoned and isinstance(refused[1], StepError)
    shifted = [(i if i < poisoned else i + 1, b) for i, b in want.proposals]
    assert got.proposals == shifted
    assert got.memories == want.memories and got.reps == want.reps


def test_an_error_outside_isolate_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator isolates only data errors: a bug stops the run."""

    def failing(rec: RequestEvent, *args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(speculate_steps, "request_step", failing)
    with pytest.raises(RuntimeError, match="a bug"):
        speculate_step(_requests(), Stored().inputs(), _stages(), HORIZON_MS)


@pytest.mark.parametrize("in_batch_log", [False, True], ids=["simulator", "live"])
def test_a_request_refused_after_feeding_the_process_state_leaves_none_of_it(
    in_batch_log: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poisoned request fails after it fed the item prior and its user's representation:
    both are as in a run without it (so are the later proposals ranked by them), with the
    live driver's batch log open or not."""
    requests = _requests()
    poisoned = 7
    real = speculate_steps.observe_representation

    def failing(reps: Any, rec: RequestEvent, *args: Any) -> Any:
        out = real(reps, rec, *args)
        if rec.request_id == requests[poisoned].request_id:
            raise StepError("fails once the state has seen the request")
        return out

    clean, clean_stored = _stages(), Stored()
    want = speculate_step(
        requests[:poisoned] + requests[poisoned + 1 :], clean_stored.inputs(), clean, HORIZON_MS
    )
    clean_stored.save(want)
    monkeypatch.setattr(speculate_steps, "observe_representation", failing)
    stages, stored = _stages(), Stored()
    with undone_on_error(stages) if in_batch_log else contextlib.nullcontext():
        got = speculate_step(requests, stored.inputs(), stages, HORIZON_MS)
    stored.save(got)
    assert [i for i, _ in got.refused] == [poisoned]
    assert got.proposals == [(i if i < poisoned else i + 1, b) for i, b in want.proposals]
    assert _state(stages, stored.memories) == _state(clean, clean_stored.memories)
