"""The FeatureStore contract on the in-memory backend (event-time clock)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from store.memory import InMemoryStore
from tests.contract.store_contract import T0, StoreContract


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture()
def clock() -> _Clock:
    return _Clock()


@pytest.fixture()
def store(clock: _Clock) -> InMemoryStore:
    return InMemoryStore(clock_ms=clock)


@pytest.fixture()
def advance(clock: _Clock) -> Callable[[int], None]:
    def _advance(ms: int) -> None:
        clock.now += ms

    return _advance


class TestInMemoryStore(StoreContract):
    def test_counts_round_trips(self, store: InMemoryStore) -> None:
        from store.protocol import ReadBatch

        store.read(ReadBatch(pairs=[(1, 2)]), 10)
        store.read(ReadBatch(aggregates=[1]), 10)
        assert store.round_trips == 2


def test_every_write_goes_through_put_many(clock: _Clock) -> None:
    """The simulator's recording store (value-parity tests) overrides only ``_put_many``: pairs,
    aggregates, neighbour lists and snapshots must all reach it."""
    from schemas.records import NeighbourList, UserAggregate
    from tests.contract.store_contract import pair

    seen: dict[bytes, bytes] = {}

    class Recording(InMemoryStore):
        def _put_many(self, items, ttl_ms):  # type: ignore[no-untyped-def]
            super()._put_many(items, ttl_ms)
            seen.update(items)

    s = Recording(clock_ms=clock)
    s.write_pairs([pair(1, 2), pair(1, 3)], 1000)
    agg = pair(1, 2)
    s.write_aggregates(
        [UserAggregate(1, T0, 86_400_000, 2, agg.model_version, agg.dtype, agg.dim, agg.vector)],
        1000,
    )
    s.write_neighbours([NeighbourList(1, T0, (5, 6), (0.9, 0.8))], 1000)
    s.write_snapshot("knn", b"x", 1000)
    assert set(seen) == set(s._data)
    assert len(seen) == 5
