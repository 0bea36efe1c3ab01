"""Issue 22: the report's ``beats_kd_with_kd`` bar (the engine-built VM trained with the tuned KD
loss as well, against vm_kd) and its degradation against vm_kd, from given probabilities."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from models.config import TrainConfig, lag_name
from models.evaluate import evaluate_runs
from models.experiment import Impressions, SeedRun
from models.metrics import headroom_closure, normalized_entropy, transfer_ratio
from models.split import TimeSplit
from tests.unit.test_evaluate_engine_block import noisy_predictions

N = 600
LAGS = (0, 600_000)
CFG = TrainConfig(seeds=2, lags_ms=LAGS, serving_lag_ms=600_000, bootstrap_replicates=200)


def _run(seed: int, y: np.ndarray) -> SeedRun:
    rng = np.random.default_rng(seed)

    def noisy(strength: float) -> np.ndarray:
        return noisy_predictions(rng, y, strength)

    probs = {"fm": noisy(0.6), "vm": noisy(0.1), "vm_kd": noisy(0.3)}
    for lag in LAGS:
        for key in ("vm_solaris", "vm_solaris_served", "vm_fm_logit"):
            probs[f"{key}@{lag_name(lag)}"] = noisy(0.4)
    probs |= {
        "vm_solaris_engine": noisy(0.2),
        "vm_solaris_engine_missing": noisy(0.1),
        "vm_solaris_engine_unavailable": probs["vm"],
        "vm_solaris_engine_kd": noisy(0.5),
        "vm_solaris_engine_kd_missing": noisy(0.25),
        "vm_solaris_engine_kd_unavailable": probs["vm_kd"],
    }
    split = TimeSplit(*(np.zeros(0, np.int64),) * 4, np.arange(N), (0, 1, 2, 3))  # type: ignore[arg-type]
    none: Any = None
    shares = {lag_name(lag): 0.5 for lag in LAGS}
    return SeedRun(
        seed, split, probs, {}, none, none, none, none, {}, {"total": 1.0, "fm": 0.5}, shares
    )


def _impressions(y: np.ndarray) -> Impressions:
    return Impressions(np.arange(N) % 60, np.arange(N), np.arange(N, dtype=np.int64), y)


def _evaluate(runs: list[SeedRun], y: np.ndarray, kd: str) -> dict[str, Any]:
    """The toy report with ``vm_solaris_kd`` = ``kd`` (which model the shipped block judges)."""
    return evaluate_runs("toy", _impressions(y), runs, replace(CFG, vm_solaris_kd=kd))


@pytest.fixture(scope="module")
def report() -> tuple[dict[str, Any], list[SeedRun], np.ndarray]:
    y = (np.random.default_rng(3).random(N) < 0.4).astype(np.int8)
    runs = [_run(0, y), _run(1, y)]
    return evaluate_runs("toy", _impressions(y), runs, CFG), runs, y


def test_beats_kd_with_kd_compares_the_combined_model_with_vm_kd(
    report: tuple[dict[str, Any], list[SeedRun], np.ndarray],
) -> None:
    rep, runs, y = report
    bar = rep["beats_kd_with_kd"]
    assert bar["served_model"] == "vm_solaris_engine_kd"
    assert bar["served_is"] == "engine-built tiers, trained with the tuned KD loss as well"
    assert set(bar) == set(rep["beats_kd"])  # the same fields as beats_kd
    ne = {
        m: float(np.mean([normalized_entropy(y, r.test_probs[m]) for r in runs]))
        for m in ("vm", "fm", "vm_kd", "vm_solaris_engine_kd")
    }
    tr_kd = transfer_ratio(ne["vm"], ne["vm_kd"], ne["fm"])
    tr_sv = transfer_ratio(ne["vm"], ne["vm_solaris_engine_kd"], ne["fm"])
    assert bar["tr_kd"] == pytest.approx(tr_kd)
    assert bar["tr_served"] == pytest.approx(tr_sv)
    assert bar["headroom_closure"] == pytest.approx(headroom_closure(tr_sv, tr_kd))
    assert bar["ne_kd_minus_served"] == pytest.approx(ne["vm_kd"] - ne["vm_solaris_engine_kd"])
    lo, hi = bar["ne_kd_minus_served_ci95"]
    assert 0 < lo <= bar["ne_kd_minus_served"] <= hi  # the combined model is clearly better here
    h_lo, h_hi = bar["headroom_closure_ci95"]
    assert h_lo < bar["headroom_closure"] < h_hi
    assert len(bar["headroom_closure_per_seed"]) == 2
    # beats_kd still measures the engine-built VM without KD
    assert rep["beats_kd"]["served_model"] == "vm_solaris_engine"


def test_degradation_with_kd_is_against_vm_kd(
    report: tuple[dict[str, Any], list[SeedRun], np.ndarray],
) -> None:
    rep, runs, y = report
    deg = rep["degradation_with_kd"]
    assert deg["model"] == "vm_solaris_engine_kd_unavailable" and deg["baseline"] == "vm_kd"
    assert deg["ne_missing_minus_vm_kd"] == pytest.approx(0.0)  # it scores as vm_kd
    assert deg["ci95"] == pytest.approx([0.0, 0.0]) and deg["holds"]
    tier = deg["missing_tier"]
    assert tier["model"] == "vm_solaris_engine_kd_missing"
    want = np.mean(
        [
            normalized_entropy(y, r.test_probs["vm_solaris_engine_kd_missing"])
            - normalized_entropy(y, r.test_probs["vm_kd"])
            for r in runs
        ]
    )
    assert tier["ne_minus_vm_kd"] == pytest.approx(want)
    assert tier["ci95"][0] <= tier["ne_minus_vm_kd"] <= tier["ci95"][1]
    # the plain degradation block is unchanged: the engine VM against vm
    assert rep["degradation"]["model"] == "vm_solaris_engine_unavailable"
    assert rep["degradation"]["baseline"] == "vm"
    assert "ne_missing_minus_vm" in rep["degradation"]


def test_shipped_block_judges_the_model_the_bundle_ships(
    report: tuple[dict[str, Any], list[SeedRun], np.ndarray],
) -> None:
    _, runs, y = report
    rep = _evaluate(runs, y, "loss")
    shipped = rep["shipped"]
    assert shipped["model"] == "vm_solaris_engine_kd" and shipped["bar"] == "beats_kd_with_kd"
    bar = rep["beats_kd_with_kd"]
    assert shipped["ne_kd_minus_served"] == bar["ne_kd_minus_served"]
    assert shipped["ne_kd_minus_served_ci95"] == bar["ne_kd_minus_served_ci95"]
    # the combined model is clearly better than KD here, with a positive FM gain
    want = "meets" if bar["headroom_closure"] >= 0.26 else "ahead"
    assert shipped["verdict"] == want
    # its outage scores as vm_kd, judged against the fair VM with its own paired interval
    deg = shipped["degradation"]
    assert deg["model"] == "vm_solaris_engine_kd_unavailable" and deg["baseline"] == "vm"
    ne = {
        m: float(np.mean([normalized_entropy(y, r.test_probs[m]) for r in runs]))
        for m in ("vm", "vm_kd")
    }
    assert deg["ne_missing_minus_vm"] == pytest.approx(ne["vm_kd"] - ne["vm"])
    lo, hi = deg["ci95"]
    assert lo <= deg["ne_missing_minus_vm"] <= hi and hi < 0  # vm_kd beats vm here
    assert deg["holds"]
    assert deg["missing_tier"]["model"] == "vm_solaris_engine_kd_missing"


def test_shipped_block_without_kd_is_the_engine_vm_and_its_degradation(
    report: tuple[dict[str, Any], list[SeedRun], np.ndarray],
) -> None:
    rep = _evaluate(report[1], report[2], "off")
    shipped = rep["shipped"]
    assert shipped["model"] == "vm_solaris_engine" and shipped["bar"] == "beats_kd"
    assert shipped["degradation"] == rep["degradation"]
    assert set(shipped["verdicts"]) == {"beats_kd", "beats_kd_with_kd"}
    assert shipped["verdicts"]["beats_kd_with_kd"] in {"meets", "ahead"}
    assert shipped["ne_kd_minus_served"] == rep["beats_kd"]["ne_kd_minus_served"]
