"""The simulator's transfer against the fair VM: gains with paired intervals, the ratio,
its split by tier, and the report line (pure: predictions in, figures out)."""

from __future__ import annotations

import numpy as np
import pytest

from store.tiers import Tier
from streams.simulate.evaluation import Predictions, log_loss, normalized_entropy
from streams.simulate.fair_baseline import ABSENT, against_fair_vm, verdict
from streams.simulate.report import fair_vm_line


def _predictions(fm_quality: float, served_quality: float, seed: int = 0) -> Predictions:
    """2,000 rows of 400 users; each model's probability is the truth blended with noise:
    ``quality`` 1 = the true probability, 0 = the base rate. The fair VM sits at 0.3."""
    rng = np.random.default_rng(seed)
    n = 2_000
    truth = rng.uniform(0.02, 0.6, n)
    labels = (rng.random(n) < truth).astype(np.int8)

    def model(quality: float) -> np.ndarray:
        noise = rng.uniform(0.02, 0.6, n)
        return (quality * truth + (1 - quality) * noise).astype(np.float32)

    tiers = np.where(np.arange(n) % 3 == 0, Tier.EXACT, Tier.STATE).astype(np.uint8)
    users = np.arange(n) % 400
    return Predictions(
        labels, tiers, model(0.0), model(fm_quality), model(served_quality), model(0.3), users
    )


def test_against_the_fair_vm_the_ratio_is_the_served_gain_over_the_fm_gain() -> None:
    pred = _predictions(fm_quality=0.9, served_quality=0.6)
    got = against_fair_vm(pred, replicates=200)
    ne = {k: normalized_entropy(pred.labels, p) for k, p in pred.models().items()}
    assert got["available"] and got["ne_vm_fair"] == pytest.approx(ne["vm_fair"])
    assert got["fm_gain"] == pytest.approx(ne["vm_fair"] - ne["fm"])
    assert got["fm_gain_is"] == "positive" and got["fm_gain_ci95"][0] > 0
    expected = (ne["vm_fair"] - ne["vm_solaris_achieved"]) / (ne["vm_fair"] - ne["fm"])
    assert got["transfer_ratio_at_achieved"] == pytest.approx(expected)
    lo, hi = got["transfer_ratio_ci95"]
    assert lo < expected < hi
    by_tier = got["transfer_by_tier"]
    assert set(by_tier) == {"exact", "state"}
    total = sum(v["contribution"] for v in by_tier.values())
    assert total == pytest.approx(expected, rel=1e-6)  # contributions add up to the ratio
    assert by_tier != pred.transfer_by_tier("vm")  # measured against another baseline
    gap = log_loss(pred.labels, pred.vm_fair) - log_loss(pred.labels, pred.fm)  # type: ignore[arg-type]
    rows = pred.tiers == Tier.EXACT
    part = rows.mean() * (
        log_loss(pred.labels[rows], pred.vm_fair[rows])  # type: ignore[index]
        - log_loss(pred.labels[rows], pred.solaris[rows])
    )
    assert by_tier["exact"]["contribution"] == pytest.approx(part / gap)


def test_an_fm_no_better_than_the_fair_vm_is_called_so() -> None:
    pred = _predictions(fm_quality=0.9, served_quality=0.6)
    assert pred.vm_fair is not None
    jitter = np.random.default_rng(5).normal(0.0, 0.002, len(pred.labels))
    fm = np.clip(pred.vm_fair + jitter, 0.01, 0.99).astype(np.float32)  # the fair VM, jittered
    same = Predictions(pred.labels, pred.tiers, pred.vm, fm, pred.solaris, pred.vm_fair, pred.users)
    got = against_fair_vm(same, replicates=200)
    assert got["fm_gain_is"] == "within noise"
    assert "not positive" in fair_vm_line(got)


def test_a_bundle_without_the_fair_vm_says_why() -> None:
    pred = _predictions(0.9, 0.6)
    bare = Predictions(pred.labels, pred.tiers, pred.vm, pred.fm, pred.solaris)
    got = against_fair_vm(bare)
    assert got == {"available": False, "reason": ABSENT}
    assert "vm_fair.onnx" in fair_vm_line(got)


def test_the_report_line_carries_gains_intervals_and_the_ratio() -> None:
    got = against_fair_vm(_predictions(fm_quality=0.9, served_quality=0.6), replicates=200)
    line = fair_vm_line(got)
    assert f"NE {got['ne_vm_fair']:.4f}" in line and "positive" in line
    assert f"{got['transfer_ratio_at_achieved']:.3f}" in line
    assert verdict((0.1, 0.2)) == "positive" and verdict((-0.2, -0.1)) == "negative"
    assert verdict((-0.1, 0.1)) == "within noise"
