"""Fixtures of the live-pipeline tests: one small traffic file and its tiny trained bundle;
the opt-in Docker services (``SOLARIS_TEST_INFRA=containers``, see ``containers.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.integration.containers import LOCAL, choose, started_services
from tests.integration.live_harness import TINY_TRAIN, small_traffic


@pytest.fixture(scope="session", autouse=True)
def test_infra() -> Iterator[None]:
    """Default: nothing (the local infra/ services). ``SOLARIS_TEST_INFRA=containers``: Kafka,
    Redis and Aerospike in Docker for the session, exported as ``SOLARIS_*`` variables so every
    ``Settings()`` and child process uses them; skipped with the reason when Docker is absent."""
    choice = choose(os.environ)
    if choice.mode == LOCAL:
        yield
        return
    if choice.skip_reason:
        if Settings().require_services:
            pytest.fail(choice.skip_reason)
        pytest.skip(choice.skip_reason)
    patch = pytest.MonkeyPatch()
    try:
        with started_services() as env:
            for key, value in env.items():
                patch.setenv(key, value)
            yield
    finally:
        patch.undo()


@pytest.fixture(scope="session")
def base_settings(test_infra: None) -> Settings:
    """Settings of the session, built after ``test_infra`` chose the services."""
    return Settings()


@pytest.fixture(scope="session")
def traffic() -> Path:
    base = Settings().cache_dir / "test-data"
    base.mkdir(parents=True, exist_ok=True)
    return small_traffic(base / "live-small-v1.avro", n_users=30, days=2.0)


@pytest.fixture(scope="session")
def bundle(traffic: Path) -> Path:
    """Trained once per traffic + config, then cached under the cache dir (seconds to train)."""
    from models.bundle import ensure_bundle
    from streams.simulate.served_tiers import EngineServedTiers

    settings = Settings().model_copy(
        update={"embedding_dim": TINY_TRAIN.embedding_dim, "history_len": TINY_TRAIN.history_len}
    )
    engine = EngineServedTiers(traffic, settings)  # vm_solaris learns what the engine serves
    return ensure_bundle(traffic, TINY_TRAIN, settings.cache_dir / "test-models", None, engine)


@pytest.fixture(scope="session")
def traffic_faults() -> Path:
    """The fault matrix's timed-replay traffic (cached under the test-data dir)."""
    from tests.integration.fault_harness import fault_traffic

    base = Settings().cache_dir / "test-data"
    base.mkdir(parents=True, exist_ok=True)
    return fault_traffic(base / "faults-v1.avro")
