"""The ranker's snapshot loader: rebuilds only on change, off the request path; bounded ledgers."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from store.memory import InMemoryStore
from store.tiers import Tier
from store.values import version_tag
from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.coverage import SpeculationLedger
from streams.engine.neighbours import NeighbourIndex, UserRepresentations
from streams.live.knn_snapshot import publish_snapshot
from streams.live.snapshot_loader import SnapshotLoader
from tests.fakes import FakeItems

T0 = 1_704_067_200_000
H = 3_600_000
DIM = 8
TAG = version_tag("v1")


def index_of(users: list[int]) -> NeighbourIndex:
    reps = UserRepresentations(FakeItems(DIM))
    for u in users:
        reps.observe(u, [u, u + 1, u + 2], T0)
    return NeighbourIndex(users, reps.get(users), reps, replace(ENGINE_DEFAULTS.neighbours, k=2))


def test_loader_rebuilds_only_when_a_snapshot_changed() -> None:
    store = InMemoryStore(clock_ms=lambda: T0)
    installed: list[NeighbourIndex] = []
    loader = SnapshotLoader(
        store,
        FakeItems(DIM),
        replace(ENGINE_DEFAULTS.neighbours, k=2),
        TAG,
        installed.append,
        interval_s=0.01,
    )
    assert not loader.poll()  # nothing published yet
    publish_snapshot(store, "w1", index_of([1, 2]), T0, H, TAG)
    assert loader.poll() and installed[-1].user_ids.tolist() == [1, 2]
    assert not loader.poll() and not loader.poll()  # unchanged: no rebuild
    assert loader.builds == 1
    publish_snapshot(store, "w2", index_of([5]), T0 + 1, H, TAG)
    assert loader.poll() and installed[-1].user_ids.tolist() == [1, 2, 5]
    publish_snapshot(store, "w1", index_of([1, 3]), T0 + 2, H, TAG)  # rewritten
    assert loader.poll() and installed[-1].user_ids.tolist() == [1, 3, 5]
    assert loader.builds == 3


def test_loader_thread_installs_and_survives_junk() -> None:
    store = InMemoryStore(clock_ms=lambda: T0)
    store.write_snapshot("junk", b"not a snapshot", H)
    installed: list[NeighbourIndex] = []
    loader = SnapshotLoader(
        store,
        FakeItems(DIM),
        replace(ENGINE_DEFAULTS.neighbours, k=2),
        TAG,
        installed.append,
        interval_s=0.01,
    )
    loader.start()
    try:
        publish_snapshot(store, "w1", index_of([1, 2]), T0, H, TAG)
        deadline = time.monotonic() + 5
        while not installed and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        loader.stop()
    assert installed and installed[-1].user_ids.tolist() == [1, 2]
    assert loader.ignored == 1


def test_speculation_ledger_is_bounded_and_counts_the_same() -> None:
    bounded = SpeculationLedger(horizon_ms=2 * H, prune_every=10)
    unbounded = SpeculationLedger(horizon_ms=10**12, prune_every=10**9)
    tiers = np.full(3, Tier.EXACT, np.uint8)
    for r in range(500):
        # one request a minute serving items r..r+2, each embedded at (its id) minutes: a pair
        # is served again by the next two requests, so the distinct embeddings are 500 + 2
        t = T0 + r * 60_000
        items = np.arange(3) + r
        ages = t - (T0 + items * 60_000 - 1)
        for ledger in (bounded, unbounded):
            ledger.on_served(7, items, ages, tiers, t)
    assert bounded.served == unbounded.served == 502
    assert len(bounded._served) <= 130  # only about the last 2 h of embeddings are kept
