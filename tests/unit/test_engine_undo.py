"""A batch run again after an infrastructure error starts from the same in-process state:
the undo log (:mod:`streams.engine.undo`) and the speculate step under it."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import pytest

from schemas.records import ProposalBatch, RequestEvent
from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.models import EngineModels
from streams.engine.recurrence import EMPTY_MEMORY, REDELIVERY_SLACK, ItemPrior, PairMemory
from streams.engine.stages import Stages, build_stages, undone_on_error
from streams.engine.state import RECENT
from streams.engine.steps.speculate import (
    SavedRep,
    StoredUserState,
    observe_representation,
    request_step,
    speculate,
)
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


def test_rollback_to_a_savepoint_undoes_only_what_came_after_it() -> None:
    """A request refused inside a batch: its changes go, the batch's earlier ones stay, and the
    whole batch still rolls back to its start (entries changed before and after the mark)."""
    mapping = {1: "a"}
    undo = UndoLog()
    undo.entry(mapping, 1)
    mapping[1] = "b"
    mark = undo.savepoint()
    undo.entry(mapping, 1)  # recorded again after the mark: "b" is what the request found
    mapping[1] = "c"
    undo.entry(mapping, 2)
    mapping[2] = "new"
    undo.rollback_to(mark)
    assert mapping == {1: "b"} and len(undo) == mark
    undo.rollback()
    assert mapping == {1: "a"}


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


Memories = dict[int, PairMemory]  #: the ``recent`` table's values


def _batch(
    stages: Stages, requests: list[RequestEvent], table: Memories
) -> tuple[list[ProposalBatch | None], Memories]:
    """The requests agent's per-request work: the in-process state changes as it goes, the
    pair memories are returned for the caller to save once the batch is delivered (the live
    driver writes tables only then)."""
    out, values = [], {}
    for rec in requests:
        u = rec.user_id
        memory = values.get(u, table.get(u, EMPTY_MEMORY))
        proposals, remembered = speculate(rec, {}, frozenset, [], memory, stages)
        assert remembered is not None
        out.append(proposals)
        values[u] = remembered
        assert stages.reps is not None
        observe_representation(stages.reps, rec, None, HORIZON_MS)
    return out, values


def _state(stages: Stages, table: Memories) -> tuple[object, ...]:
    prior, reps = stages.prior, stages.reps
    assert isinstance(prior, ItemPrior) and reps is not None
    lists = {u: RECENT.dump(m) for u, m in table.items()}
    vectors = {u: reps.vector(u).tolist() for u in sorted(reps._vec)}
    window = prior.window
    buckets = {b: list(items) for b, items in window._buckets.items()}
    counts = (dict(window._counts), buckets, window._newest)
    return counts, lists, vectors, dict(reps._seen_at)


@pytest.mark.parametrize("fail_after", [30, 17])
def test_a_batch_run_again_after_an_error_gives_what_one_clean_run_gives(fail_after: int) -> None:
    """The first try of the second batch fails (after all of it, or part way through), the
    driver runs it again: the proposals (with the recurrence inputs the verify step ranks by),
    the item prior and representations afterwards and the stored pair memories are those of a
    run without the failure."""
    requests = _requests()
    first, second = requests[:12], requests[12:]
    clean, clean_table = _stages(), {}
    clean_table.update(_batch(clean, first, clean_table)[1])
    expected, values = _batch(clean, second, clean_table)
    clean_table.update(values)

    faulty, table = _stages(), {}
    with undone_on_error(faulty):
        table.update(_batch(faulty, first, table)[1])
    with pytest.raises(DeliveryFailed), undone_on_error(faulty):
        _batch(faulty, second[: fail_after - 12], table)
        raise DeliveryFailed  # the delivery failed: nothing of the batch is saved
    with undone_on_error(faulty):
        again, values = _batch(faulty, second, table)
    table.update(values)
    assert again == expected
    assert _state(faulty, table) == _state(clean, clean_table)


def test_a_redelivered_batch_after_its_state_was_saved_gives_the_same_pair_counts() -> None:
    """A worker that died after saving a batch's tables but before committing its offsets: the
    next owner rebuilds the item prior from the saved pair memories (as after any restart: the
    counts the first owner held) and runs the batch's uncommitted tail again on them; the pair
    counts are those of the first run, and no request is counted twice, in the memories or in
    the prior. (The prior's counts on the rerun's messages include the tail's later lists; the
    verify step skips these requests anyway: their ledger was saved before the memories.)"""
    requests = _requests()
    stages, table = _stages(), {}
    first, values = _batch(stages, requests, table)
    table.update(values)
    tail = _redeliverable_tail(requests)  # each user's last requests are in the saved memories
    assert tail >= 3
    next_owner = _stages()
    assert next_owner.prior is not None
    next_owner.prior.rebuild(table.values())
    assert next_owner.prior == stages.prior
    again, values_again = _batch(next_owner, requests[-tail:], table)
    assert values_again == {u: table[u] for u in values_again}
    assert next_owner.prior == stages.prior
    assert [b.pair_counts if b else None for b in again] == [
        b.pair_counts if b else None for b in first[-tail:]
    ]


def _redeliverable_tail(requests: list[RequestEvent]) -> int:
    """The longest tail with at most :data:`REDELIVERY_SLACK` requests of any one user."""
    per_user: dict[int, int] = {}
    for n, rec in enumerate(reversed(requests)):
        per_user[rec.user_id] = per_user.get(rec.user_id, 0) + 1
        if per_user[rec.user_id] > REDELIVERY_SLACK:
            return n
    return len(requests)


def test_the_undo_log_is_off_outside_a_batch() -> None:
    stages = _stages()
    with undone_on_error(stages) as undo:
        _batch(stages, _requests()[:3], {})
        assert len(undo) > 0
    assert stages.prior is not None and stages.prior.undo is None
    assert stages.reps is not None and stages.reps._undo is None


def _stored(saved: dict[int, SavedRep], memories: Memories, user: int) -> StoredUserState:
    return StoredUserState(lambda: saved.get(user), lambda: memories.get(user, EMPTY_MEMORY))


def test_request_step_is_speculate_then_the_representation_as_both_drivers_ran_them() -> None:
    """Both drivers call :func:`request_step`; it must give what the two rules give in that
    order (proposals with their recurrence inputs and the pair memory, then the representation
    to persist)."""
    one, two = _stages(), _stages()
    saved: dict[int, SavedRep] = {}
    want_memories: Memories = {}
    got_memories: Memories = {}
    for rec in _requests():
        u = rec.user_id
        want, want_memory = speculate(
            rec, {}, frozenset, [], want_memories.get(u, EMPTY_MEMORY), one
        )
        assert one.reps is not None and want_memory is not None
        want_memories[u] = want_memory
        want_rep = observe_representation(one.reps, rec, saved.get(u), HORIZON_MS)
        got = request_step(rec, {}, frozenset, [], _stored(saved, got_memories, u), two, HORIZON_MS)
        assert got.proposals == want and got.rep == want_rep and got.foreign_resets == 0
        assert got.memory == want_memory
        if got.rep is not None:
            saved[u] = got.rep
        if got.memory is not None:
            got_memories[u] = got.memory
    assert _state(one, want_memories) == _state(two, got_memories)


def test_request_step_loads_only_the_state_its_stages_read() -> None:
    """No neighbour tier: no representation loaded; a ranking without the pair memory (and so
    without the item prior, which counts its lists): no memory loaded or returned."""
    from dataclasses import replace

    def never() -> None:
        raise AssertionError("loaded state no stage reads")

    rec = _requests()[0]
    stages = replace(_stages(), reps=None)
    got = request_step(
        rec, {}, frozenset, [], StoredUserState(never, lambda: EMPTY_MEMORY), stages, HORIZON_MS
    )
    want, _ = speculate(rec, {}, frozenset, [], EMPTY_MEMORY, _stages())
    assert got.rep is None and got.proposals == want and got.memory is not None
    stages = replace(_stages(), reps=None, pair_memory_ms=None, prior=None)
    got = request_step(rec, {}, frozenset, [], StoredUserState(never, never), stages, HORIZON_MS)
    assert got.memory is None and got.proposals is not None
    assert got.proposals.pair_counts == () and got.proposals.prior_counts == ()  # no inputs
    with pytest.raises(RuntimeError, match="needs the memory"):
        speculate(rec, {}, frozenset, [], None, replace(_stages(), pair_memory_ms=None))


def test_the_item_prior_is_undone_across_window_moves_and_savepoints() -> None:
    """A batch whose lists move the prior's window (buckets expire, new ones open) and drop
    lists from memories: a rollback to a request's savepoint, then of the whole batch, gives
    the counts as they were at each point, bucket by bucket."""
    import copy

    from streams.engine.recurrence import PRIOR_BUCKET_MS, ItemPrior
    from streams.engine.undo import UndoLog

    rng = np.random.default_rng(5)
    prior = ItemPrior(window_ms=3 * PRIOR_BUCKET_MS)
    memories: dict[int, PairMemory] = {}

    def step(n: int) -> None:
        user = int(rng.integers(0, 4))
        before = memories.get(user, EMPTY_MEMORY)
        items = [int(x) for x in rng.choice(30, 6, replace=False)]
        after = before.remember(f"r{n}", items, T0 + n * PRIOR_BUCKET_MS // 3)
        prior.replace(before, after)
        memories[user] = after

    def snapshot() -> tuple[Any, ...]:
        window = prior.window
        return copy.deepcopy((window._counts, window._buckets, window._newest, memories))

    for n in range(20):
        step(n)
    at_start = snapshot()
    undo = UndoLog()
    prior.begin(undo)
    for n in range(20, 35):
        step(n)
    mark, at_mark = undo.savepoint(), snapshot()
    for n in range(35, 50):  # several buckets expire in here
        step(n)
    undo.rollback_to(mark)
    memories = dict(at_mark[3])  # the driver's own state (its tables)
    assert snapshot() == at_mark
    undo.rollback()
    prior.end()
    memories = dict(at_start[3])
    assert snapshot() == at_start


def test_the_lookahead_counts_of_a_failed_history_batch_are_undone() -> None:
    """The history agent runs a batch under :func:`rolled_back_on_error` for the look-ahead: a
    batch that fails leaves the co-visits and trending counts as before it, so its rerun counts
    its impressions once."""
    import copy

    from schemas.records import ImpressionEvent
    from streams.engine.lookahead import Lookahead
    from streams.engine.stages import rolled_back_on_error
    from streams.engine.steps.history import observe_impression

    rng = np.random.default_rng(9)
    la, histories = Lookahead(), {u: [] for u in range(5)}  # type: ignore[var-annotated]

    def impressions(first: int, last: int) -> None:
        for n in range(first, last):
            user, item = int(rng.integers(0, 5)), int(rng.integers(0, 20))
            imp = ImpressionEvent(f"r{n}", user, item, T0 + n * 400_000, 0, n % 2)
            observe_impression(histories[user], imp, 6, la)

    impressions(0, 30)
    before = copy.deepcopy((la.covisit._pairs, la.trending._counts, la.trending._buckets))
    kept = copy.deepcopy(histories)
    with pytest.raises(DeliveryFailed), rolled_back_on_error([la]):
        impressions(30, 60)  # the trending window moves in here
        raise DeliveryFailed
    assert (la.covisit._pairs, la.trending._counts, la.trending._buckets) == before
    assert la.undo is None
    rebuilt = Lookahead()
    rebuilt.rebuild(kept.values())  # the tables were not saved: they hold the state before
    assert rebuilt == la


def test_a_recorded_call_runs_on_rollback_in_its_turn() -> None:
    """``call`` undoes a change no recorded value restores cheaply (an append): in order with
    the other records, newest first, and only for the part rolled back."""
    log, mapping = UndoLog(), {"k": 1}
    appended: list[int] = []
    appended.append(1)
    log.call(appended.pop)
    mark = log.savepoint()
    log.entry(mapping, "k")
    mapping["k"] = 2
    appended.append(2)
    log.call(appended.pop)
    log.rollback_to(mark)
    assert appended == [1] and mapping == {"k": 1}
    log.rollback()
    assert appended == [] and len(log) == 0
