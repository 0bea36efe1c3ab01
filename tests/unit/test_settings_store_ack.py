"""The replica acknowledgement the Redis stores get from settings."""

from __future__ import annotations

import pytest

from store.redis_writes import ReplicaAck
from streams.settings import Settings
from streams.stores import redis_ack, store_from_settings


def test_no_replica_wait_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOLARIS_REDIS_WAIT_REPLICAS", raising=False)
    assert redis_ack(Settings()) is None


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"])
def test_the_wait_settings_reach_the_redis_stores(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.setenv("SOLARIS_REDIS_WAIT_REPLICAS", "2")
    monkeypatch.setenv("SOLARIS_REDIS_WAIT_TIMEOUT_MS", "250")
    settings = Settings(store_backend=backend, store_url="redis://127.0.0.1:1")
    assert redis_ack(settings) == ReplicaAck(2, 250)
    store = store_from_settings(settings)  # opening connects nothing
    try:
        assert getattr(store, "ack", None) == ReplicaAck(2, 250)
    finally:
        store.close()
