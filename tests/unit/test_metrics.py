"""Metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.metrics import (
    auc,
    entropy,
    headroom_closure,
    logloss,
    normalized_entropy,
    transfer_ratio,
    user_bootstrap,
)


def test_logloss_and_ne_by_hand() -> None:
    y = np.array([1, 0, 1, 1])
    p = np.array([0.8, 0.3, 0.6, 0.9])
    expected = -(math.log(0.8) + math.log(0.7) + math.log(0.6) + math.log(0.9)) / 4
    assert logloss(y, p) == pytest.approx(expected)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert entropy(0.75) == pytest.approx(h)
    assert normalized_entropy(y, p) == pytest.approx(expected / h)


def test_base_rate_predictor_has_ne_one() -> None:
    y = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    assert normalized_entropy(y, np.full(10, 0.2)) == pytest.approx(1.0)
    assert normalized_entropy(y, np.full(10, 0.5)) > 1.0


def test_auc_matches_pair_counting_with_ties() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300), 1)  # many ties
    pos, neg = s[y == 1], s[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert auc(y, s) == pytest.approx(wins / (pos.size * neg.size))
    assert auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == pytest.approx(0.75)
    assert math.isnan(auc(np.ones(4), np.arange(4.0)))


def test_transfer_ratio() -> None:
    assert transfer_ratio(0.9, 0.85, 0.8) == pytest.approx(0.5)
    assert transfer_ratio(0.9, 0.95, 0.8) == pytest.approx(-0.5)
    assert math.isnan(transfer_ratio(0.9, 0.85, 0.9))


def test_user_bootstrap_intervals_cover_the_estimate() -> None:
    rng = np.random.default_rng(0)
    n = 2000
    users = rng.integers(0, 100, n)
    truth = rng.random(n)
    y = (rng.random(n) < truth).astype(np.int8)
    probs = {
        "fm": [np.clip(truth, 0.01, 0.99)],
        "vm": [np.full(n, y.mean())],
        "half": [np.clip(0.5 * truth + 0.5 * y.mean(), 0.01, 0.99)],
    }
    res = user_bootstrap(users, y, probs, {"half": "half", "same": "fm"}, replicates=300)
    for name in ("fm", "half"):  # ("vm" is the base rate: NE >= 1 in every replicate)
        lo, hi = res.ne_interval[name]
        point = normalized_entropy(y, probs[name][0])
        assert lo <= point <= hi
    assert res.tr_interval["same"] == pytest.approx((1.0, 1.0))
    lo, hi = res.tr_interval["half"]
    assert 0.0 < lo < hi < 1.0
    assert res.gap_interval[0] > 0
    again = user_bootstrap(users, y, probs, {"half": "half"}, replicates=300)
    assert again.tr_interval["half"] == res.tr_interval["half"]  # seeded


def test_headroom_closure_by_hand() -> None:
    # the paper's own figures: (0.43 - 0.225) / 0.775
    assert headroom_closure(0.43, 0.225) == pytest.approx(0.2645, abs=1e-4)
    assert headroom_closure(0.2, 0.4) == pytest.approx(-1 / 3)
    assert math.isnan(headroom_closure(0.5, 1.0))
    assert math.isnan(headroom_closure(float("nan"), 0.2))


def test_paired_bootstrap_of_a_ne_difference_and_of_h() -> None:
    """One set of resamples for every model: a model against itself differs by exactly 0,
    and h's interval follows the per-replicate TRs."""
    rng = np.random.default_rng(1)
    n = 3000
    users = rng.integers(0, 150, n)
    truth = rng.random(n)
    y = (rng.random(n) < truth).astype(np.int8)
    base = np.full(n, y.mean())

    def mix(w: float) -> list[np.ndarray]:
        return [np.clip(w * truth + (1 - w) * base, 0.01, 0.99)]

    probs = {"fm": mix(1.0), "vm": [base], "kd": mix(0.3), "served": mix(0.7)}
    res = user_bootstrap(
        users,
        y,
        probs,
        {"kd": "kd", "served": "served"},
        replicates=300,
        diff_pairs={"kd_minus_served": ("kd", "served"), "self": ("kd", "kd")},
        headroom_pairs={"served": ("served", "kd"), "none": ("kd", "kd")},
    )
    assert res.diff_interval["self"] == (0.0, 0.0)
    lo, hi = res.diff_interval["kd_minus_served"]
    point = normalized_entropy(y, probs["kd"][0]) - normalized_entropy(y, probs["served"][0])
    assert 0.0 < lo <= point <= hi
    assert res.headroom_interval["none"] == pytest.approx((0.0, 0.0))
    h_lo, h_hi = res.headroom_interval["served"]
    ne = {k: normalized_entropy(y, v[0]) for k, v in probs.items()}
    h = headroom_closure(
        transfer_ratio(ne["vm"], ne["served"], ne["fm"]),
        transfer_ratio(ne["vm"], ne["kd"], ne["fm"]),
    )
    assert 0.0 < h_lo <= h <= h_hi < 1.0
