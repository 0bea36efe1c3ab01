"""Fixtures of the live-pipeline tests: one small traffic file and its tiny trained bundle."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.settings import Settings
from tests.integration.live_harness import TINY_TRAIN, small_traffic


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
