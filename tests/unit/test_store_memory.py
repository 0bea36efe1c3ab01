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
