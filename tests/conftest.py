"""Shared fixtures: settings per test, and access to the real local Kafka and Redis.

Integration tests need the services started by ``infra/`` (``make test`` does it). When they are
not reachable the tests skip with the reason, unless ``SOLARIS_REQUIRE_SERVICES=1`` (set by
``make test`` and CI), where they fail instead: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from streams.settings import Settings


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session", autouse=True)
def _faust_state_in_test_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Workers the tests start keep their Faust table state under pytest's temporary folders
    (pytest keeps the last three runs), not in the user's cache, where every test's folder
    would stay for good."""
    if "SOLARIS_STATE_DIR" in os.environ:
        yield
        return
    os.environ["SOLARIS_STATE_DIR"] = str(tmp_path_factory.mktemp("faust-state"))
    try:
        yield
    finally:
        os.environ.pop("SOLARIS_STATE_DIR", None)


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    return Settings()


def _need(settings: Settings, what: str, host: str, port: int) -> None:
    if _reachable(host, port):
        return
    msg = f"{what} not reachable at {host}:{port} (start it with `make infra-up`)"
    if settings.require_services:
        pytest.fail(msg)
    pytest.skip(msg)


def require_kafka_and_redis(settings: Settings) -> None:
    """Skip (or fail under SOLARIS_REQUIRE_SERVICES) unless both services answer."""
    parsed = urlparse(settings.store_url)
    _need(settings, "Redis", parsed.hostname or "127.0.0.1", parsed.port or 6379)
    host, port = settings.kafka_bootstrap.split(",")[0].rsplit(":", 1)
    _need(settings, "Kafka", host, int(port))


@pytest.fixture()
def redis_url(base_settings: Settings) -> str:
    parsed = urlparse(base_settings.store_url)
    _need(base_settings, "Redis", parsed.hostname or "127.0.0.1", parsed.port or 6379)
    return base_settings.store_url


@pytest.fixture()
def kafka_bootstrap(base_settings: Settings) -> str:
    host, port = base_settings.kafka_bootstrap.split(",")[0].rsplit(":", 1)
    _need(base_settings, "Kafka", host, int(port))
    return base_settings.kafka_bootstrap


@pytest.fixture()
def unique() -> str:
    """A short unique id for topic prefixes, consumer groups and key prefixes."""
    return uuid.uuid4().hex[:10]


@pytest.fixture()
def test_settings(base_settings: Settings, unique: str) -> Iterator[Settings]:
    """Settings with a unique topic and key prefix so tests never see each other's data."""
    yield base_settings.model_copy(
        update={"topic_prefix": f"t{unique}", "key_prefix": f"t{unique}", "topic_partitions": 2}
    )
