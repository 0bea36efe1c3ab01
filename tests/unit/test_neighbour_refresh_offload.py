"""The live neighbour refresh runs in its own thread with a time budget (issue 24 item 5): the
event loop (other agents, consumer heartbeats) keeps running while an index is built."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest

from store.memory import InMemoryStore
from streams.engine.models import EngineModels
from streams.live import metrics, neighbours_job
from streams.live.components import Components
from streams.settings import Settings
from tests.fakes import FakeFM, FakeItems

DIM, T0 = 8, 1_700_000_000_000


def _refresher(settings: Settings) -> neighbours_job.NeighbourRefresher:
    parts = Components(settings, EngineModels(FakeFM(DIM), items=FakeItems(DIM)), InMemoryStore())
    assert parts.reps is not None
    rng = np.random.default_rng(0)
    for u in range(1, 30):
        parts.reps.set(u, rng.normal(size=DIM).astype(np.float32), T0)
        parts.aggregate_times[u] = T0
    return neighbours_job.NeighbourRefresher(settings, parts, "w")


def test_refresh_runs_off_the_event_loop_which_keeps_ticking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran_in: list[str] = []
    real = neighbours_job.build_refresh

    def slow_refresh(*args: Any) -> Any:
        ran_in.append(threading.current_thread().name)
        time.sleep(0.3)  # an index build at scale
        return real(*args)

    monkeypatch.setattr(neighbours_job, "build_refresh", slow_refresh)
    refresher = _refresher(Settings())

    async def main() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        await refresher.maybe_refresh(T0 + 1, {}, {})
        task.cancel()
        return ticks

    ticks = asyncio.run(main())
    assert ran_in and ran_in[0].startswith("solaris-neighbours")
    assert ticks >= 10, f"the event loop ticked only {ticks} times during a 0.3 s refresh"
    assert refresher.parts.store.read_snapshots()  # the result was still published


def test_a_refresh_over_its_budget_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = metrics.NEIGHBOUR_REFRESH_OVER_BUDGET._value.get()
    refresher = _refresher(Settings(neighbour_refresh_budget_s=1e-9))
    asyncio.run(refresher.maybe_refresh(T0 + 1, {}, {}))
    assert metrics.NEIGHBOUR_REFRESH_OVER_BUDGET._value.get() == before + 1
    assert any("over its time budget" in r.getMessage() for r in caplog.records)
