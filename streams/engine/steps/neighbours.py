"""Neighbours step: at event time ``t``, when a refresh is due, rebuild the KNN index over the
users with a fresh aggregate and the neighbour lists of the users active since the last
refresh; one definition for both drivers.

State in, state out: :class:`NeighbourState` is what a driver keeps between refreshes for its
users (the simulator: all users; a pipeline worker: those of its partitions): the refresh clock,
each user's newest aggregate time, the user representations. The step has two halves so a
driver can keep its event loop free: :func:`plan_refresh` (cheap: the due check, the clock, and
forgetting users past the horizon; it mutates the state, so it runs where the state's only
writer runs) and :func:`build_refresh` (the index build and every query: seconds at scale; it
only reads the representations, so the live job runs it in a thread while the requests agent,
the representations' only writer, awaits it). :func:`neighbours_step` is both, for a driver
that has no loop to keep free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.records import NeighbourList
from streams.engine.config import EngineConfig
from streams.engine.neighbours import (
    NeighbourIndex,
    RefreshClock,
    UserRepresentations,
    fresh_users,
    refresh,
)


@dataclass(slots=True)
class NeighbourState:
    """What the neighbour step keeps between refreshes."""

    clock: RefreshClock
    reps: UserRepresentations
    #: user -> event time of their newest aggregate (the index's population, before forgetting)
    newest: dict[int, int] = field(default_factory=dict)

    @classmethod
    def new(cls, cfg: EngineConfig, reps: UserRepresentations) -> NeighbourState:
        """A state with no refresh yet: the clock from the config (every driver the same)."""
        clock = RefreshClock(
            cfg.neighbours.interval_ms, cfg.reader.neighbour_ttl_ms, cfg.neighbours.growth_factor
        )
        return cls(clock, reps)

    def saw_aggregate(self, user: int, event_time_ms: int) -> None:
        """A new aggregate of ``user`` was stored (its newest)."""
        self.newest[user] = event_time_ms


@dataclass(frozen=True, slots=True)
class RefreshPlan:
    """A refresh decided at event time ``t``: who is indexed, who gets a new list."""

    t: int
    #: users active since this time get a new list (the previous refresh)
    since: int
    #: users with an aggregate within the horizon: the index's population
    fresh: list[int]


@dataclass(frozen=True, slots=True)
class NeighbourRefresh:
    """What one refresh produced: the index (the ranker's cold-start index, the snapshot a
    worker publishes) and the lists to store."""

    t: int
    index: NeighbourIndex
    lists: list[NeighbourList]


def plan_refresh(state: NeighbourState, t: int, cfg: EngineConfig) -> RefreshPlan | None:
    """None unless a refresh is due at ``t``; else mark it on the clock and forget the users
    whose newest aggregate (and representations not seen) is past the neighbour-aggregate
    horizon, so memory follows the active users."""
    if not state.clock.due(t, len(state.newest)):
        return None
    since = state.clock.start(t, len(state.newest))
    fresh = fresh_users(state.newest, state.reps, t, cfg.reader.neighbour_aggregate_ttl_ms)
    return RefreshPlan(t, since, fresh)


def build_refresh(
    reps: UserRepresentations, plan: RefreshPlan, cfg: EngineConfig
) -> NeighbourRefresh:
    """The index over ``plan.fresh`` and the lists of the users active since ``plan.since``."""
    index, lists = refresh(reps, plan.fresh, plan.since, plan.t, cfg.neighbours)
    return NeighbourRefresh(plan.t, index, lists)


def neighbours_step(state: NeighbourState, t: int, cfg: EngineConfig) -> NeighbourRefresh | None:
    """:func:`plan_refresh` then :func:`build_refresh`, in the caller's thread."""
    plan = plan_refresh(state, t, cfg)
    return None if plan is None else build_refresh(state.reps, plan, cfg)
