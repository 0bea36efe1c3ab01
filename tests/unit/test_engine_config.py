"""Every engine setting is declared once: the live worker, the ranker and the simulator build
the same :class:`EngineConfig` from ``Settings``, and no sub-config has a default of its own."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from store.memory import InMemoryStore
from store.reader import ReaderConfig
from streams.engine.config import ENGINE_DEFAULTS, EngineConfig
from streams.engine.models import EngineModels
from streams.engine.neighbours import NeighbourConfig
from streams.engine.speculator import SpeculatorConfig
from streams.engine.verifier import VerifierConfig
from streams.live.components import Components
from streams.settings import HOUR_MS, Settings
from streams.simulate.config import SimConfig, sim_config_from_settings
from streams.simulate.simulator import Simulator
from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM

DIM = 8
#: a value other than the default for every setting the engine reads
CHANGED: dict[str, Any] = {
    "speculation_strategies": "candidates,lookahead",
    "speculation_budget": 7,
    "speculation_lookahead_items": 3,
    "refresh_after_ms": 5 * 60_000,
    "verifier_threshold": 0.2,
    "verifier_top_k": 4,
    "verifier_top_fraction": 0.25,
    "verifier_rank_by": "vm",
    "neighbours_k": 3,
    "neighbour_min_similarity": 0.1,
    "neighbour_exact_max": 50,
    "neighbour_interval_ms": 60_000,
    "neighbour_growth_factor": 1.5,
    "pair_ttl_ms": 2 * HOUR_MS,
    "aggregate_ttl_ms": 3 * HOUR_MS,
    "neighbour_aggregate_ttl_ms": 4 * HOUR_MS,
    "neighbour_ttl_ms": 5 * HOUR_MS,
    "read_deadline_ms": 9.0,
    "reader_max_neighbour_pair_keys": 99,
    "reader_neighbour_hints": 16,
    "history_len": 7,
    "aggregate_window_ms": 6 * HOUR_MS,
    "aggregate_bucket_ms": HOUR_MS // 2,
    "history_store_ttl_ms": 48 * HOUR_MS,
}


def _models() -> EngineModels:
    return EngineModels(FakeFM(DIM), FakeVM(), FakeSolaris(), FakeItems(DIM))


def _assert_same(a: Any, b: Any, path: str = "engine") -> None:
    """Field by field, so a failure names the setting that differs."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            _assert_same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.mark.parametrize("overrides", [{}, CHANGED], ids=["defaults", "every-setting-changed"])
def test_live_worker_and_simulator_build_the_same_engine_config(
    overrides: dict[str, Any],
) -> None:
    settings = Settings(store_backend="memory", **overrides)
    live = Components(settings, _models(), InMemoryStore())
    sim = Simulator(sim_config_from_settings(settings, DIM), _models())
    _assert_same(live.config, sim.config.engine)
    assert live.knobs == sim.knobs
    live_agg, sim_agg = live.stages.aggregator, sim.stages.aggregator
    assert (live_agg.window_ms, live_agg.bucket_ms) == (sim_agg.window_ms, sim_agg.bucket_ms)
    assert (live_agg.window_ms, live_agg.bucket_ms) == (
        settings.aggregate_window_ms,
        settings.aggregate_bucket_ms,
    )


def test_every_engine_setting_reaches_the_engine_config() -> None:
    """A setting the engine config ignores would silently differ between tools: each one
    changed alone must change the config."""
    base = EngineConfig.from_settings(Settings(store_backend="memory"), DIM)
    for name, value in CHANGED.items():
        changed = EngineConfig.from_settings(Settings(store_backend="memory", **{name: value}), DIM)
        assert changed != base, f"SOLARIS_{name.upper()} does not reach EngineConfig"


def test_the_simulators_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for var in [v for v in os.environ if v.startswith("SOLARIS_")]:
        monkeypatch.delenv(var)
    _assert_same(SimConfig().engine, EngineConfig.from_settings(Settings()))
    _assert_same(ENGINE_DEFAULTS, EngineConfig.from_settings(Settings()))


@pytest.mark.parametrize(
    "sub_config", [SpeculatorConfig, VerifierConfig, NeighbourConfig, ReaderConfig]
)
def test_sub_configs_have_no_defaults_of_their_own(sub_config: type) -> None:
    with pytest.raises(TypeError, match="missing"):
        sub_config()


def test_sim_config_routes_engine_fields_to_the_engine() -> None:
    cfg = SimConfig(EngineConfig.defaults(DIM))
    changed = cfg.with_changes(history_len=3, verify=False)
    assert changed.engine.history_len == 3 and changed.history_len == 3
    assert changed.verify is False and cfg.verify is True
    with pytest.raises(TypeError):
        cfg.with_changes(no_such_knob=1)
