"""The neighbours step (issue 23): one refresh rule for the simulator and the live job."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from streams.engine.config import ENGINE_DEFAULTS, EngineConfig
from streams.engine.neighbours import UserRepresentations
from streams.engine.steps.neighbours import (
    NeighbourState,
    build_refresh,
    neighbours_step,
    plan_refresh,
)
from tests.unit.test_neighbour_similarity import SharedDirectionItems

HOUR = 3_600_000


def config(interval_ms: int = HOUR, horizon_ms: int = 10 * HOUR) -> EngineConfig:
    return replace(
        ENGINE_DEFAULTS,
        neighbours=replace(
            ENGINE_DEFAULTS.neighbours,
            k=2,
            min_similarity=-1.0,
            interval_ms=interval_ms,
            growth_factor=1.0,
        ),
        reader=replace(ENGINE_DEFAULTS.reader, neighbour_aggregate_ttl_ms=horizon_ms),
    )


def state_with_users(cfg: EngineConfig) -> NeighbourState:
    """Users 1-4 seen with overlapping candidate sets; 1-3 have an aggregate, 1 an old one."""
    state = NeighbourState.new(cfg, UserRepresentations(SharedDirectionItems()))
    for u, (t, items) in {
        1: (0, range(0, 20)),
        2: (11 * HOUR, range(5, 25)),
        3: (11 * HOUR, range(10, 30)),
        4: (11 * HOUR, range(0, 30)),
    }.items():
        state.reps.observe(u, list(items), t)
    state.saw_aggregate(1, 0)
    state.saw_aggregate(2, 11 * HOUR)
    state.saw_aggregate(3, 11 * HOUR)
    return state


def test_the_clock_comes_from_the_engine_config() -> None:
    cfg = config(interval_ms=5 * HOUR)
    clock = NeighbourState.new(cfg, UserRepresentations(SharedDirectionItems())).clock
    assert clock.interval_ms == 5 * HOUR
    assert clock.ttl_ms == cfg.reader.neighbour_ttl_ms
    assert clock.growth_factor == cfg.neighbours.growth_factor


def test_a_refresh_is_planned_when_due_and_forgets_users_past_the_horizon() -> None:
    cfg = config()
    state = state_with_users(cfg)
    t = 12 * HOUR
    plan = plan_refresh(state, t, cfg)
    assert plan is not None and plan.t == t
    assert plan.fresh == [2, 3]  # user 1's aggregate is 12 h old, past the 10 h horizon
    assert plan.since == t - cfg.reader.neighbour_ttl_ms  # first refresh: a TTL back
    assert state.newest == {2: 11 * HOUR, 3: 11 * HOUR} and not state.reps.has(1)
    assert plan_refresh(state, t + HOUR - 1, cfg) is None  # not due within the interval
    later = plan_refresh(state, t + HOUR, cfg)
    assert later is not None and later.since == t  # active since the previous refresh


def test_building_a_refresh_reads_the_state_without_changing_it() -> None:
    cfg = config()
    state = state_with_users(cfg)
    plan = plan_refresh(state, 12 * HOUR, cfg)
    assert plan is not None
    newest, vectors = dict(state.newest), {u: state.reps.vector(u).copy() for u in (2, 3, 4)}
    done = build_refresh(state.reps, plan, cfg)
    assert state.newest == newest
    assert all(np.array_equal(state.reps.vector(u), v) for u, v in vectors.items())
    assert sorted(done.index.user_ids.tolist()) == [2, 3]  # only users with a fresh aggregate
    lists = {n.user_id: n for n in done.lists}
    assert sorted(lists) == [2, 3, 4]  # every user active since the last refresh gets a list
    assert lists[4].neighbours and set(lists[4].neighbours) <= {2, 3}
    assert 2 not in lists[2].neighbours  # never one's own neighbour
    assert all(n.event_time_ms == 12 * HOUR for n in done.lists)


def test_the_step_is_the_plan_then_the_build() -> None:
    cfg = config()
    a, b = state_with_users(cfg), state_with_users(cfg)
    assert neighbours_step(a, 12 * HOUR - 1, cfg) is not None  # first call: due
    plan = plan_refresh(b, 12 * HOUR - 1, cfg)
    assert plan is not None
    whole = neighbours_step(a, 13 * HOUR, cfg)
    plan = plan_refresh(b, 13 * HOUR, cfg)
    assert plan is not None
    split = build_refresh(b.reps, plan, cfg)
    assert whole is not None
    assert whole.lists == split.lists
    assert whole.index.user_ids.tolist() == split.index.user_ids.tolist()
    assert a.newest == b.newest and a.clock.last_ms == b.clock.last_ms


def test_both_drivers_keep_the_same_neighbour_state() -> None:
    """The simulator and a pipeline worker build their neighbour state from one engine config:
    equal clocks, and the live aggregate agent's ``aggregate_times`` is the state's own dict."""
    from streams.live.components import Components
    from streams.settings import Settings
    from streams.simulate.config import SimConfig
    from streams.simulate.simulator import Simulator
    from tests.unit.test_simulator import DIM, models

    settings = Settings(embedding_dim=DIM)
    engine_models = models()
    live = Components(settings, engine_models, store=None)  # type: ignore[arg-type]
    sim = Simulator(SimConfig(engine=live.config), engine_models)
    assert live.neighbours is not None and sim.neighbours is not None
    assert vars(live.neighbours.clock) == vars(sim.neighbours.clock)
    live.aggregate_times[7] = 123
    assert live.neighbours.newest == {7: 123}
