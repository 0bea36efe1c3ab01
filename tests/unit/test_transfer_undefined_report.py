"""Issue 25 item 7: when the FM's NE gain over the VM is not positive by its 95 % interval, the
report carries null, not numbers, in every field that divides by that gain (transfer ratios,
their spread and intervals, within-tier TRs, headroom closure h), and the Markdown prints
"undefined" in those cells; NE values and paired NE differences stay numbers."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")  # models.builder (json_safe, the JSON's real path) imports it

from models.builder import json_safe
from models.config import TrainConfig, lag_name
from models.cross_task import summary_lines
from models.evaluate import evaluate_runs, markdown
from models.experiment import Impressions, SeedRun
from models.results import table
from models.split import TimeSplit
from tests.unit.test_evaluate_engine_block import noisy_predictions

N = 600
LAGS = (0, 60_000, 600_000)
CFG = TrainConfig(seeds=2, lags_ms=LAGS, serving_lag_ms=600_000, bootstrap_replicates=200)
BARS = ("beats_kd", "beats_kd_state_tier", "beats_kd_with_kd")
TR_KEYS = ("transfer_ratio", "transfer_ratio_std", "transfer_ratio_ci95")
BAR_TR_KEYS = (
    "tr_served",
    "tr_kd",
    "headroom_closure",
    "headroom_closure_ci95",
    "headroom_closure_per_seed",
)
NUMBER = re.compile(r"\d\.\d")


def _run(seed: int, y: np.ndarray, fm_strength: float, id_only_strength: float) -> SeedRun:
    rng = np.random.default_rng(seed)

    def noisy(strength: float) -> np.ndarray:
        return noisy_predictions(rng, y, strength)

    vm = noisy(0.3)
    # the FM: the VM's predictions nudged (no real gain) or a clearly better model
    fm = (
        np.clip(vm + rng.normal(0, 0.01, y.shape), 0.02, 0.98).astype(np.float32)
        if fm_strength is None
        else noisy(fm_strength)
    )
    probs = {"fm": fm, "vm": vm, "vm_kd": noisy(0.32), "vm_id_only": noisy(id_only_strength)}
    for lag in LAGS:
        name = lag_name(lag)
        for key in (
            "vm_solaris",
            "vm_solaris_served",
            "vm_fm_logit",
            "vm_solaris_aggregate",
            "vm_score_tiers",
            "vm_score_tiers_served",
            "vm_solaris_unavailable",
            "vm_solaris_missing",
        ):
            probs[f"{key}@{name}"] = noisy(0.35)
    for key in ("item_aware", "item_served", "state_aware", "state_served"):
        probs[f"vm_solaris_{key}@10m"] = noisy(0.34)  # the within-tier diagnostics
    probs |= {
        "vm_solaris_engine": noisy(0.36),
        "vm_solaris_engine_state": noisy(0.37),
        "vm_solaris_engine_missing": noisy(0.3),
        "vm_solaris_engine_unavailable": vm,
        "vm_solaris_offline_on_engine": noisy(0.33),
        "vm_solaris_engine_kd": noisy(0.38),
        "vm_solaris_engine_kd_missing": noisy(0.32),
        "vm_solaris_engine_kd_unavailable": probs["vm_kd"],
    }
    split = TimeSplit(*(np.zeros(0, np.int64),) * 4, np.arange(N), (0, 1, 2, 3))  # type: ignore[arg-type]
    none: Any = None
    shares = {lag_name(lag): 0.5 for lag in LAGS}
    return SeedRun(
        seed, split, probs, {}, none, none, none, none, {}, {"total": 1.0, "fm": 0.5}, shares
    )


def _report(fm_strength: float | None, id_only_strength: float = 0.3) -> dict[str, Any]:
    """The report as `solaris evaluate --json` writes it (evaluate_runs, json_safe, JSON)."""
    y = (np.random.default_rng(3).random(N) < 0.4).astype(np.int8)
    imps = Impressions(np.arange(N) % 60, np.arange(N), np.arange(N, dtype=np.int64), y)
    runs = [_run(s, y, fm_strength, id_only_strength) for s in (0, 1)]
    return json.loads(json.dumps(json_safe(evaluate_runs("toy", imps, runs, CFG))))


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [v for value in x.values() for v in _leaves(value)]
    if isinstance(x, list):
        return [v for value in x for v in _leaves(value)]
    return [x]


def _tr_fields(report: dict[str, Any]) -> dict[str, Any]:
    """Every field of the report that divides by the FM's NE gain over the VM."""
    fields = {key: report[key] for key in TR_KEYS}
    for lag, block in report["lagged"].items():
        fields |= {f"lagged.{lag}.{key}": block[key] for key in TR_KEYS}
    for bar in BARS:
        fields |= {f"{bar}.{key}": report[bar][key] for key in BAR_TR_KEYS}
    return fields


def _tr_cells(text: str) -> list[str]:
    """The Markdown's TR cells: the model table's TR column and the by-lag table's cells."""
    cells = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if line.startswith("| ") and len(parts) == 6 and parts[0] != "model":
            cells.append(parts[5])  # model table: TR is the last column
        elif line.startswith("| ") and len(parts) == 7 and parts[0] != "Δ":
            cells += parts[1:]  # by-lag table: every cell after Δ
    return [c for c in cells if c]


@pytest.fixture(scope="module")
def undefined() -> dict[str, Any]:
    return _report(fm_strength=None, id_only_strength=0.3)


@pytest.fixture(scope="module")
def defined() -> dict[str, Any]:
    return _report(fm_strength=0.6, id_only_strength=0.2)


def test_an_fm_gain_within_noise_nulls_every_transfer_ratio(undefined: dict[str, Any]) -> None:
    rep = undefined
    lo, hi = rep["fm_vm_gap"]["ci95"]
    assert lo <= 0.0 <= hi and rep["transfer_defined"] is False  # the case under test
    fields = _tr_fields(rep)
    # the structure stays (which ratios exist), every number in it is null
    assert {"kd", "solaris", "solaris_served", "solaris_engine"} <= set(rep["transfer_ratio"])
    assert {"solaris_item_aware", "solaris_state_aware"} <= set(
        rep["lagged"]["10m"]["transfer_ratio"]
    )
    for name, value in fields.items():
        leaves = _leaves(value)
        assert leaves and all(v is None for v in leaves), (name, value)
    # NE values, the FM gain and paired NE differences do not divide by the gain: numbers
    assert isinstance(rep["fm_vm_gap"]["ne"], float)
    assert all(isinstance(m["ne"], float) for m in rep["models"].values())
    for bar in BARS:
        assert isinstance(rep[bar]["ne_kd_minus_served"], float)
        assert all(isinstance(v, float) for v in rep[bar]["ne_kd_minus_served_ci95"])
        assert rep[bar]["fm_gain"] == "within noise"
    assert isinstance(rep["degradation"]["ne_missing_minus_vm"], float)
    # the id-only VM is as good as the fair one here: its ratios divide by noise as well
    vs = rep["vs_id_only"]
    assert vs["transfer_defined"] is False
    assert all(v is None for v in _leaves([vs["transfer_ratio"], vs["transfer_ratio_ci95"]]))
    assert isinstance(vs["fm_vm_gap"]["ne"], float)
    # the numbers survive for diagnosis only, under their own name
    kept = rep["transfer_ratios_if_defined"]
    assert isinstance(kept["transfer_ratio"]["kd"], float)
    assert isinstance(kept["beats_kd"]["headroom_closure"], float)
    assert isinstance(kept["lagged"]["10m"]["transfer_ratio"]["solaris_item_aware"], float)


def test_the_markdown_prints_no_transfer_ratio_when_undefined(undefined: dict[str, Any]) -> None:
    text = markdown(undefined)
    assert "**TRANSFER UNDEFINED**" in text
    cells = _tr_cells(text)
    assert len(cells) > 10 and all(c == "undefined" for c in cells), cells
    engine = next(line for line in text.splitlines() if line.startswith("Served mix at"))
    assert "undefined" in engine and not NUMBER.search(engine), engine
    for line in (line for line in text.splitlines() if line.startswith("Against tuned KD")):
        assert "TR served undefined, TR kd undefined, headroom closure h = undefined" in line
        assert re.search(r"NE\(kd\) − NE\(served\) = -?\d\.\d{4} \[", line), line  # a number
    id_only = next(line for line in text.splitlines() if line.startswith("Against the id-only"))
    assert not NUMBER.search(id_only.split("):", 1)[1]), id_only  # TRs after the NE figures
    # docs/knowledge-transfer.md's table reads the same JSON without a crash, TRs as "–"
    row = table({"toy": undefined}).splitlines()[2]
    assert "within noise" in row
    # ... and so does `solaris cross-task`'s terminal summary
    task = {"fm_task": {"label": "a"}, "vm_task": {"label": "b"}, "vm_task_positive_share": 0.2}
    lines = summary_lines({**undefined, "task": task})
    assert lines[1].startswith("TR kd undefined | solaris exact undefined | served undefined")
    assert lines[2].startswith("h undefined; NE(kd) - NE(served) ")


def test_a_positive_fm_gain_keeps_the_numbers(defined: dict[str, Any]) -> None:
    rep = defined
    assert rep["fm_vm_gap"]["ci95"][0] > 0 and rep["transfer_defined"] is True
    for name, value in _tr_fields(rep).items():
        leaves = _leaves(value)
        assert leaves and all(isinstance(v, float) for v in leaves), (name, value)
    assert rep["vs_id_only"]["transfer_defined"] is True
    assert all(isinstance(v, float) for v in _leaves(rep["vs_id_only"]["transfer_ratio"]))
    assert "transfer_ratios_if_defined" not in rep
    text = markdown(rep)
    assert "TRANSFER UNDEFINED" not in text and "undefined" not in text
    cells = _tr_cells(text)
    assert len(cells) > 10 and all(NUMBER.search(c) for c in cells), cells
    assert f"headroom closure h = {rep['beats_kd']['headroom_closure']:.3f}" in text
    ceiling = rep["beats_kd"]["ceiling"]
    assert f"ceiling NE(kd) − NE(fm) = {ceiling['ne_kd_minus_fm']:.4f}" in text


def test_the_id_only_ratios_follow_their_own_gain() -> None:
    """vs_id_only divides by NE(vm_id_only) − NE(fm), not by the fair VM's gap: a weak id-only
    VM keeps its ratios even when the FM gains nothing over the fair VM."""
    rep = _report(fm_strength=None, id_only_strength=0.0)
    assert rep["transfer_defined"] is False
    vs = rep["vs_id_only"]
    assert vs["fm_vm_gap"]["ci95"][0] > 0 and vs["transfer_defined"] is True
    assert all(isinstance(v, float) for v in _leaves(vs["transfer_ratio"]))
