"""The evaluation puts the engine-built served mix next to the offline one at the serving lag."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.config import TrainConfig, lag_name
from models.evaluate import evaluate_runs, markdown
from models.experiment import Impressions, SeedRun
from models.split import TimeSplit

N = 400
LAGS = (0, 60_000, 600_000)


def noisy_predictions(rng: np.random.Generator, y: np.ndarray, strength: float) -> np.ndarray:
    """Predictions that know the label ``strength`` well (0 = base rate)."""
    p = 0.5 + strength * (y - 0.5) + rng.normal(0, 0.05, y.shape)
    return np.clip(p, 0.02, 0.98).astype(np.float32)


def _run(seed: int, y: np.ndarray) -> SeedRun:
    rng = np.random.default_rng(seed)

    def noisy(strength: float) -> np.ndarray:
        return noisy_predictions(rng, y, strength)

    probs = {"fm": noisy(0.6), "vm": noisy(0.1), "vm_kd": noisy(0.15)}
    for lag in LAGS:
        name = lag_name(lag)
        for key in ("vm_solaris", "vm_solaris_served", "vm_fm_logit"):
            probs[f"{key}@{name}"] = noisy(0.4)
    probs |= {
        "vm_solaris_engine": noisy(0.5),
        "vm_solaris_engine_missing": noisy(0.1),
        "vm_solaris_engine_unavailable": noisy(0.1),
        "vm_solaris_offline_on_engine": noisy(0.3),
        "vm_solaris_engine_kd": noisy(0.55),
    }
    split = TimeSplit(*(np.zeros(0, np.int64),) * 4, np.arange(N), (0, 1, 2, 3))  # type: ignore[arg-type]
    shares = {lag_name(lag): 0.5 for lag in LAGS}
    none: Any = None
    return SeedRun(
        seed, split, probs, {}, none, none, none, none, {}, {"total": 1.0, "fm": 0.5}, shares
    )


def test_engine_trs_sit_in_the_serving_lag_block_only() -> None:
    y = (np.arange(N) % 2).astype(np.int8)
    imps = Impressions(np.arange(N) % 40, np.arange(N), np.arange(N, dtype=np.int64), y)
    cfg = TrainConfig(seeds=2, lags_ms=LAGS, serving_lag_ms=600_000, bootstrap_replicates=50)
    report = evaluate_runs("toy", imps, [_run(0, y), _run(1, y)], cfg)
    block = report["lagged"]["10m"]
    for name in (
        "solaris_engine",
        "solaris_engine_missing",
        "solaris_offline_on_engine",
        "solaris_engine_kd",
    ):
        assert block["transfer_ratio"][name] == report["transfer_ratio"][name]
        lo, hi = block["transfer_ratio_ci95"][name]
        assert lo <= hi
    assert "solaris_served" in block["transfer_ratio"]
    assert "solaris_engine" not in report["lagged"]["1m"]["transfer_ratio"]
    table = markdown(report)
    assert "Served mix at Δ = 10m: engine-built tiers" in table
    assert "engine-built and distilled (vm_solaris_engine_kd)" in table
