"""The engine's per-stage steps, which both the simulator and the Faust agents call."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from schemas.records import ImpressionEvent, ProposalBatch, RequestEvent
from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.ledger import Confirmed
from streams.engine.lookahead import Lookahead
from streams.engine.neighbours import UserRepresentations
from streams.engine.steps.event_time import ClockRule, EventClock
from streams.engine.steps.history import RECENT_POSITIVES, observe_impression, recent_positive_items
from streams.engine.steps.speculate import SavedRep, observe_representation
from streams.engine.steps.verify import (
    VERIFIED_REQUESTS_KEPT,
    LedgerState,
    VerifyKnobs,
    rounds,
    verify_requests,
)
from streams.engine.verifier import Verifier
from tests.fakes import FakeItems, FakeVM

#: the neighbour horizon the drivers pass (Settings.neighbour_aggregate_ttl_ms default)
HORIZON = 7 * 24 * 3_600_000

T0 = 1_700_000_000_000
H = 3_600_000
KNOBS = VerifyKnobs(refresh_after_ms=2 * H, pair_ttl_ms=4 * H, history_len=3, in_flight_ms=2 * H)


def batch(rid: str, user: int, t: int, items: tuple[int, ...]) -> ProposalBatch:
    return ProposalBatch(rid, user, t, len(items), items, ("candidates",) * len(items))


def none_back(user: int) -> Confirmed:
    """No embedding came back for ``user`` (the rules here never ask: in-flight is off)."""
    return frozenset


def test_rounds_put_a_users_nth_request_in_round_n() -> None:
    assert rounds([1, 2, 1, 1, 3, 2]) == [0, 0, 1, 2, 0, 1]


def test_a_users_second_request_in_one_call_sees_the_first_ones_pairs_as_fresh() -> None:
    saved = {7: LedgerState()}
    results = verify_requests(
        [batch("r1", 7, T0, (1, 2)), batch("r2", 7, T0 + 1000, (2, 3)), batch("r3", 8, T0, (2,))],
        lambda u: saved.get(u, LedgerState()),
        lambda u: [],
        None,
        KNOBS,
        none_back,
    )
    assert [r.out.item_ids if r.out else None for r in results] == [(1, 2), (3,), (2,)]
    assert results[1].ledger is not None and results[1].ledger.requests == ["r1", "r2"]
    assert results[1].ledger.pairs == {1: T0, 2: T0, 3: T0 + 1000}
    assert saved[7] == LedgerState()  # the caller's state is never mutated


def test_a_redelivered_request_yields_nothing_and_changes_no_state() -> None:
    led = LedgerState({1: T0}, ["r1"])
    (res,) = verify_requests(
        [batch("r1", 7, T0, (1, 2))], lambda u: led, lambda u: [], None, KNOBS, none_back
    )
    assert res.redelivered and res.out is None and res.ledger is None


def test_a_redelivery_whose_id_left_the_remembered_list_is_still_recognised() -> None:
    """A burst of more than VERIFIED_REQUESTS_KEPT requests of one user, then its oldest ones
    redelivered (a rebalance before their offsets were committed): the ids list no longer holds
    them, but they are older than the newest verified request, so they yield nothing. Before,
    they were verified again and picked the pairs the first pass had left: the join/leave
    fault test's "pairs verified live but not by the simulator" (user 15's first two requests,
    18 in the first second of the replay)."""
    n = VERIFIED_REQUESTS_KEPT + 2
    burst = [batch(f"r{k}", 7, T0 + k * 1000, (k, 100 + k)) for k in range(n)]
    state = {7: LedgerState()}
    for b in burst:  # one request at a time, as the simulator and successive batches do
        (res,) = verify_requests([b], lambda u: state[u], lambda u: [], None, KNOBS, none_back)
        assert res.ledger is not None
        state[7] = res.ledger
    assert "r0" not in state[7].requests and "r1" not in state[7].requests
    again = verify_requests(burst[:2], lambda u: state[u], lambda u: [], None, KNOBS, none_back)
    assert [r.redelivered for r in again] == [True, True]
    assert all(r.out is None and r.ledger is None for r in again)
    newest = batch("r-late-but-equal", 7, T0 + (n - 1) * 1000, (999,))
    (res,) = verify_requests([newest], lambda u: state[u], lambda u: [], None, KNOBS, none_back)
    assert not res.redelivered and res.out is not None  # same time as the newest: not older


def test_verified_batch_carries_history_strictly_before_the_request() -> None:
    entries = [(5, 1, T0 - 3000), (6, 0, T0 - 2000), (9, 1, T0)]
    (res,) = verify_requests(
        [batch("r1", 7, T0, (1,))],
        lambda u: LedgerState(),
        lambda u: entries,
        None,
        KNOBS,
        none_back,
    )
    assert res.out is not None
    assert res.out.history_items == (5, 6) and res.out.history_times_ms == (T0 - 3000, T0 - 2000)


def test_one_vm_call_per_round_and_the_verifier_filters() -> None:
    vm = FakeVM()
    calls = []
    score = vm.score
    vm.score = lambda *a: calls.append(1) or score(*a)  # type: ignore[method-assign]
    verifier = Verifier(vm, replace(ENGINE_DEFAULTS.verifier, top_fraction=0.5, rank_by="vm"))
    results = verify_requests(
        [batch(f"r{u}", u, T0, (1, 2, 3, 4)) for u in range(5)],
        lambda u: LedgerState(),
        lambda u: [],
        verifier,
        KNOBS,
        none_back,
    )
    assert len(calls) == 1
    assert all(r.out is not None and len(r.out.item_ids) == 2 for r in results)


def test_event_clock_refuses_events_far_ahead_of_the_wall_clock() -> None:
    clock = EventClock(max_future_ms=H)
    wall = T0
    assert clock.admit(0, T0 - 30 * 24 * H, wall)  # a replay of old traffic
    assert clock.admit(0, T0 - 2 * 24 * H, wall)  # a 4-week gap in old traffic is fine
    assert not clock.admit(0, wall + 2 * H, wall)  # ahead of the wall clock
    assert not clock.admit(1, 4_102_444_800_000, wall)  # year 2100 on a fresh partition
    assert clock.admit(1, wall + H // 2, wall)
    assert clock.high_water_ms == {0: T0 - 2 * 24 * H, 1: wall + H // 2}


def test_event_clock_cannot_be_walked_ahead_by_a_chain_of_admitted_events() -> None:
    clock = EventClock(max_future_ms=H)
    assert clock.admit(0, T0 + 59 * 60_000, T0)
    assert not clock.admit(0, T0 + 118 * 60_000, T0)  # within 1 h of the first, not of now


def test_partition_clock_refuses_events_far_ahead_of_a_replay_of_old_traffic() -> None:
    """The issue's case the wall clock misses: replaying last month, an event dated last week."""
    clock = EventClock(max_future_ms=H, rule=ClockRule.PARTITION)
    old = T0 - 30 * 24 * H
    assert clock.admit(0, old, T0)  # first event of a partition: judged by the wall clock
    assert clock.admit(0, old + H - 1, T0)
    assert not clock.admit(0, old + 7 * 24 * H, T0)  # behind now, far ahead of the replay
    assert clock.admit(1, old + 7 * 24 * H, T0)  # another partition keeps its own mark
    assert clock.high_water_ms == {0: old + H - 1, 1: old + 7 * 24 * H}
    wall = EventClock(max_future_ms=H)
    assert wall.admit(0, old, T0) and wall.admit(0, old + 7 * 24 * H, T0)  # the default admits


def test_partition_clock_is_capped_by_the_wall_clock() -> None:
    """Live the mark can sit ahead of now (events within the bound): the wall clock caps it, so
    a chain of events cannot creep ahead until the broker refuses one."""
    clock = EventClock(max_future_ms=H, rule=ClockRule.PARTITION)
    assert clock.admit(0, T0 + 59 * 60_000, T0)
    assert clock.bound_ms(0, T0) == T0 + H
    assert not clock.admit(0, T0 + 118 * 60_000, T0)


def test_history_step_keeps_event_order_and_feeds_lookahead_before_adding() -> None:
    look = Lookahead()
    entries: list[tuple[int, int, int]] = []
    for n, item in enumerate([10, 11, 12, 13, 14, 15, 16]):
        observe_impression(entries, ImpressionEvent(f"r{n}", 1, item, T0 + n, n, 1), 100, look)
    observe_impression(entries, ImpressionEvent("r0", 1, 10, T0, 0, 1), 100, look)  # redelivery
    assert [e[0] for e in entries] == [10, 11, 12, 13, 14, 15, 16]
    assert recent_positive_items(entries) == [12, 13, 14, 15, 16][-RECENT_POSITIVES:]


def test_representation_is_restored_after_a_restart_and_not_folded_twice() -> None:
    items = FakeItems(4)
    first = UserRepresentations(items)
    r1 = RequestEvent("r1", 1, T0, "feed", (1, 2, 3))
    saved = observe_representation(first, r1, None, HORIZON)
    assert saved is not None
    restarted = UserRepresentations(items)
    assert observe_representation(restarted, r1, saved, HORIZON) is None  # redelivery: unchanged
    assert np.allclose(restarted.vector(1), first.vector(1))
    r2 = RequestEvent("r2", 1, T0 + 1, "feed", (4,))
    again = observe_representation(restarted, r2, saved, HORIZON)
    assert again is not None and again.seen_at_ms == T0 + 1
    assert SavedRep.from_json(again.to_json()) == again


def test_a_verified_pair_whose_vector_never_came_back_is_verified_again_after_the_timeout() -> None:
    """Issue 24: the ledger marks a pair when it is verified; past the in-flight timeout the
    mark holds only if the pair's vector came back (here item 1's did, item 2's did not)."""
    knobs = replace(KNOBS, in_flight_ms=H // 2)
    led = LedgerState({1: T0, 2: T0}, ["r0"])

    def back(user: int) -> Confirmed:
        return lambda: frozenset({(1, T0)})

    def items(t: int) -> tuple[int, ...] | None:
        (res,) = verify_requests(
            [batch(f"r{t}", 7, t, (1, 2, 3))], lambda u: led, lambda u: [], None, knobs, back
        )
        return res.out.item_ids if res.out else None

    assert items(T0 + H // 4) == (3,)  # 1 and 2 may still be on their way
    assert items(T0 + H) == (2, 3)  # 2 never came back: verified again
    assert items(T0 + 2 * H) == (1, 2, 3)  # refresh_after: everything, as before
