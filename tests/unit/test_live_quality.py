"""Live quality: joining served scores to impressions, NE and the live transfer ratio."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.metrics import normalized_entropy
from schemas.records import ImpressionEvent
from streams.live.quality import JoinedRows, ServedScores, join, quality_summary

T0 = 1_704_067_200_000


def scored(user: int, t: int, items: list[int], served: list[float]) -> ServedScores:
    body = {
        "request_id": "x",
        "user_id": user,
        "event_time_ms": t,
        "items": items,
        "scores": served,
        "vm_scores": [0.5] * len(items),
        "tiers": [0] * len(items),
    }
    return ServedScores.from_json(json.loads(json.dumps(body)))


def test_join_matches_request_and_item_and_cuts_history_before_the_request() -> None:
    scores = {"r2": scored(7, T0 + 1000, [10, 11, 12], [0.1, 0.2, 0.3])}
    imps = [
        ImpressionEvent("r1", 7, 5, T0, 0, 1),  # earlier request: history, not scored
        ImpressionEvent("r2", 7, 11, T0 + 1000, 1, 1),
        ImpressionEvent("r2", 7, 99, T0 + 1000, 2, 0),  # not a candidate
        ImpressionEvent("r2", 7, 12, T0 + 1000, 3, 0),
    ]
    rows = join(scores, imps, history_len=4)
    assert rows.unjoined == 2
    assert rows.items.tolist() == [11, 12]
    assert rows.labels.tolist() == [1, 0]
    assert rows.served.tolist() == pytest.approx([0.2, 0.3])
    assert rows.times.tolist() == [T0 + 1000, T0 + 1000]
    # only what was known strictly before the request: the impression at T0, not r2's own
    assert [h.items.tolist() for h in rows.histories] == [[5], [5]]


def test_a_plain_vm_fallback_is_marked_on_its_joined_rows() -> None:
    """Rows whose request was served the plain VM (failed read) say so; older messages
    without the flag read as not fallen back."""
    body = {
        "request_id": "r1",
        "user_id": 7,
        "event_time_ms": T0,
        "items": [10],
        "scores": [0.4],
        "vm_scores": [0.4],
        "tiers": [4],
    }
    old = ServedScores.from_json(body)
    fell = ServedScores.from_json(body | {"baseline_fallback": True})
    imps = [ImpressionEvent("r1", 7, 10, T0, 0, 1), ImpressionEvent("r2", 7, 10, T0, 0, 0)]
    rows = join({"r1": fell, "r2": old}, imps, history_len=4)
    assert old.fallback is False and fell.fallback is True
    assert rows.fallback is not None and rows.fallback.tolist() == [True, False]


def test_served_scores_survive_json_exactly() -> None:
    value = float(np.float32(0.123456789))
    s = scored(1, T0, [3], [value])
    assert s.served[0] == np.float32(value)


def rows_of(y: np.ndarray, vm: np.ndarray, served: np.ndarray, users: np.ndarray) -> JoinedRows:
    n = len(y)
    return JoinedRows(
        users, np.arange(n), np.full(n, T0), y, served, vm, np.zeros(n, np.uint8), [], 0
    )


def test_quality_summary_transfer_ratio_and_interval() -> None:
    rng = np.random.default_rng(0)
    n = 4000
    truth = rng.uniform(0.05, 0.6, n)
    y = (rng.uniform(size=n) < truth).astype(np.int8)
    vm = np.full(n, y.mean(), np.float32)  # knows only the base rate
    fm = truth.astype(np.float32)  # knows everything
    served = (0.5 * vm + 0.5 * fm).astype(np.float32)  # in between
    users = rng.integers(0, 200, n)
    out = quality_summary(rows_of(y, vm, served, users), fm, replicates=200)
    ne_vm, ne_s, ne_fm = (normalized_entropy(y, p) for p in (vm, served, fm))
    assert out["ne"]["vm"] == pytest.approx(ne_vm)
    assert out["transfer_ratio"] == pytest.approx((ne_vm - ne_s) / (ne_vm - ne_fm))
    assert 0.3 < out["transfer_ratio"] < 1.0
    lo, hi = out["transfer_ratio_ci"]
    assert lo < out["transfer_ratio"] < hi


def test_live_audit_measures_against_the_fair_vm_like_the_simulator() -> None:
    """Issue 22: every transfer ratio against the fair VM too. The live audit's figures are
    the simulator's definition (``against_fair_vm``) on the same rows, value for value."""
    from streams.simulate.evaluation import Predictions
    from streams.simulate.fair_baseline import against_fair_vm

    rng = np.random.default_rng(1)
    n = 4000
    truth = rng.uniform(0.05, 0.6, n)
    y = (rng.uniform(size=n) < truth).astype(np.int8)
    vm = np.full(n, y.mean(), np.float32)
    fair = (0.4 * truth + 0.6 * y.mean()).astype(np.float32)  # some history: better than vm
    fm = truth.astype(np.float32)
    served = (0.3 * fair + 0.7 * fm).astype(np.float32)
    users = rng.integers(0, 200, n)
    rows = rows_of(y, vm, served, users)
    without = quality_summary(rows, fm, replicates=200)
    assert without["vs_fair_vm"]["available"] is False
    out = quality_summary(rows, fm, replicates=200, p_fair=fair)
    got = out["vs_fair_vm"]
    ne_fair, ne_s, ne_fm = (normalized_entropy(y, p) for p in (fair, served, fm))
    assert out["ne"]["vm_fair"] == pytest.approx(ne_fair)
    assert got["fm_gain"] == pytest.approx(ne_fair - ne_fm)
    assert got["transfer_ratio"] == pytest.approx((ne_fair - ne_s) / (ne_fair - ne_fm))
    # against the fair VM the ratio is smaller than against the id-only VM (it had history)
    assert got["transfer_ratio"] < out["transfer_ratio"]
    tiers = np.zeros(n, np.uint8)
    sim = against_fair_vm(Predictions(y, tiers, vm, fm, served, fair, users), replicates=200)
    for key in ("ne_vm_fair", "fm_gain", "fm_gain_ci95", "served_gain", "served_gain_ci95"):
        assert got[key] == pytest.approx(sim[key])
    assert got["transfer_ratio"] == pytest.approx(sim["transfer_ratio_at_achieved"])
    assert got["transfer_ratio_ci95"] == pytest.approx(sim["transfer_ratio_ci95"])


def test_quality_summary_refuses_too_few_or_one_class() -> None:
    y = np.ones(100, np.int8)
    p = np.full(100, 0.5, np.float32)
    out = quality_summary(rows_of(y, p, p, np.arange(100)), p)
    assert "ne" not in out and "both classes" in out["note"]


def test_quality_meter_equals_batch_ne_and_counts_unjoined() -> None:
    from streams.live.quality import QualityMeter

    rng = np.random.default_rng(1)
    meter = QualityMeter(max_pending=3)
    labels, served, vm = [], [], []
    for r in range(5):
        s = rng.uniform(0.05, 0.95, 4).astype(np.float32)
        v = rng.uniform(0.05, 0.95, 4).astype(np.float32)
        meter.on_scored(f"r{r}", np.arange(4) + 10, s, v)
        for j in (0, 2):
            y = int(rng.integers(0, 2)) if r else j // 2
            assert meter.on_impression(ImpressionEvent(f"r{r}", 1, 10 + j, T0, j, y))
            labels.append(y)
            served.append(s[j])
            vm.append(v[j])
    assert not meter.on_impression(ImpressionEvent("r4", 1, 99, T0, 0, 1))  # not a candidate
    # An impression before its request waits for it; the oldest waiting are dropped past max.
    assert not meter.on_impression(ImpressionEvent("late", 1, 10, T0, 0, 1))
    assert meter.waiting == 1
    meter.on_scored("late", np.array([10]), np.array([0.9], np.float32), np.array([0.5]))
    assert meter.waiting == 0 and meter.joined == 11
    labels.append(1)
    served.append(np.float32(0.9))
    vm.append(0.5)
    for k in range(4):
        meter.on_impression(ImpressionEvent(f"never{k}", 1, 10, T0, 0, 1))
    assert meter.waiting == 3
    assert meter.unjoined == 2 and meter.joined == 11
    ne = meter.ne()
    assert ne is not None
    y = np.asarray(labels)
    assert ne["vm"] == pytest.approx(normalized_entropy(y, np.asarray(vm)), rel=1e-5)
    assert ne["vm_solaris_served"] == pytest.approx(
        normalized_entropy(y, np.asarray(served)), rel=1e-5
    )


def test_report_rows_show_both_baselines_and_say_when_the_fair_vm_is_absent() -> None:
    from streams.live.report import quality_rows

    quality = {
        "impressions": 1234,
        "ne": {"vm": 0.95, "vm_solaris_served": 0.90, "fm": 0.88},
        "transfer_ratio": 0.714,
        "transfer_ratio_ci": [0.5, 0.9],
        "vs_fair_vm": {
            "available": True,
            "ne_vm_fair": 0.91,
            "fm_gain": 0.03,
            "fm_gain_ci95": [0.01, 0.05],
            "fm_gain_is": "positive",
            "served_gain": 0.01,
            "served_gain_ci95": [-0.01, 0.03],
            "served_gain_is": "within noise",
            "transfer_ratio": 0.333,
            "transfer_ratio_ci95": [-0.2, 0.8],
        },
    }
    rows = dict(quality_rows(quality))
    assert rows["live transfer ratio vs id-only VM (95 % CI)"].startswith("0.714 (0.500 … 0.900)")
    assert rows["live transfer ratio vs fair VM (95 % CI)"] == "0.333 (-0.200 … 0.800)"
    assert "+0.0300 [+0.0100, +0.0500] positive" in rows["FM / served gain over fair VM"]
    # an FM no better than the fair VM: the ratio divides by noise and is not shown as a result
    quality["vs_fair_vm"] = {**quality["vs_fair_vm"], "fm_gain_is": "negative"}
    assert dict(quality_rows(quality))["live transfer ratio vs fair VM (95 % CI)"] == (
        "undefined: the FM's gain over the fair VM is negative"
    )
    quality["vs_fair_vm"] = {"available": False, "reason": "no vm_fair.onnx"}
    assert dict(quality_rows(quality))["vs fair VM"] == "no vm_fair.onnx"
