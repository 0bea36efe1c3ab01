"""The live neighbour refresh: run inside the requests agent every interval of *event time*,
exactly when the simulator runs it, over this worker's users (its partitions).

The build and the queries run in their own thread (``offload.NEIGHBOUR_POOL``), not on the
event loop: at scale they take seconds, and a loop blocked that long misses consumer heartbeats
(a rebalance, then the same refresh again: issue 24 item 5). The requests agent awaits it, and
it is the only agent that changes the representations, so the thread reads a stable state.
A refresh longer than ``SOLARIS_NEIGHBOUR_REFRESH_BUDGET_S`` is logged and counted.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from store.values import version_tag
from streams.engine.state import REPS, aggregate_newest_ms
from streams.engine.steps.neighbours import NeighbourState, build_refresh, plan_refresh
from streams.engine.steps.speculate import restore_representation
from streams.live import metrics
from streams.live.components import Components
from streams.live.knn_snapshot import publish_snapshot
from streams.live.offload import NEIGHBOUR_POOL, in_pool
from streams.live.retry import write_with_retry
from streams.settings import Settings

log = logging.getLogger(__name__)


def snapshot_name(app_id: str) -> str:
    """One snapshot per worker process (workers of one group own different partitions)."""
    return f"{app_id}-{socket.gethostname()}-{os.getpid()}"


class NeighbourRefresher:
    def __init__(self, settings: Settings, parts: Components, name: str) -> None:
        self.settings = settings
        self.parts = parts
        self.name = name
        self._restored = False
        #: snapshots say which bundle's item vectors built them (the ranker skips foreign ones)
        self.version_tag = version_tag(parts.models.fm.model_version)

    def due(self, t: int) -> bool:
        """Whether :meth:`maybe_refresh` has work at event time ``t``: a refresh due, or the
        state still to restore (the first check after a start). Reads, changes nothing."""
        state = self.parts.neighbours
        if state is None:
            return False
        return not self._restored or state.clock.due(t, len(state.newest))

    async def maybe_refresh(self, t: int, aggregates: Any, reps_table: Any) -> None:
        """Refresh when due at event time ``t`` (before the request at ``t`` is speculated)."""
        state, s = self.parts.neighbours, self.settings
        if state is None:
            return
        if not self._restored:  # after a restart the in-memory state comes back from the tables
            self._restore(state, aggregates, reps_table)
        plan = plan_refresh(state, t, self.parts.config)  # on the loop: it mutates the state
        if plan is None:
            return
        started = time.perf_counter()
        done = await in_pool(NEIGHBOUR_POOL, build_refresh, state.reps, plan, self.parts.config)
        self._account(time.perf_counter() - started, len(done.index), len(done.lists))
        store = self.parts.store
        await write_with_retry(
            "write_neighbours", lambda: store.write_neighbours(done.lists, s.neighbour_ttl_ms)
        )
        await write_with_retry(
            "write_snapshot",
            lambda: publish_snapshot(
                store, self.name, done.index, t, s.neighbour_ttl_ms, self.version_tag
            ),
        )
        metrics.NEIGHBOUR_LISTS.inc(len(done.lists))
        log.info(
            "neighbours refreshed",
            extra={"indexed": len(done.index), "lists": len(done.lists), "event_time_ms": t},
        )

    def _restore(self, state: NeighbourState, aggregates: Any, reps_table: Any) -> None:
        """Representations and newest aggregate times from the worker's tables (its first
        refresh check after a start)."""
        reps = state.reps
        before = reps.foreign
        for u, v in reps_table.items():
            saved = REPS.load(v)
            if saved is not None and not reps.has(int(u)):
                restore_representation(reps, int(u), saved)
        metrics.count_foreign_resets(reps.foreign - before, "representation")
        for u, v in aggregates.items():
            newest = aggregate_newest_ms(v)
            if newest is not None:
                state.newest.setdefault(int(u), newest)
        self._restored = True

    def _account(self, seconds: float, indexed: int, lists: int) -> None:
        metrics.NEIGHBOUR_REFRESH_SECONDS.observe(seconds)
        budget = self.settings.neighbour_refresh_budget_s
        if seconds > budget:
            metrics.NEIGHBOUR_REFRESH_OVER_BUDGET.inc()
            log.warning(
                "neighbour refresh over its time budget",
                extra={
                    "seconds": round(seconds, 3),
                    "budget_s": budget,
                    "indexed": indexed,
                    "lists": lists,
                },
            )
