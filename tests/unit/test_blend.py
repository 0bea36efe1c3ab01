"""models.blend: a three-parameter logistic blend of two models' logits."""

from __future__ import annotations

import numpy as np
import pytest

from models.blend import Blend, fit_blend, logit


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def test_fit_recovers_the_weights_that_made_the_labels() -> None:
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(0, 1.5, 40_000), rng.normal(0, 1.5, 40_000)
    y = (rng.random(40_000) < _sigmoid(0.7 * z1 + 0.4 * z2 - 0.5)).astype(np.int8)
    got = fit_blend(_sigmoid(z1), _sigmoid(z2), y, l2=0.0)
    assert (got.a, got.b, got.c) == pytest.approx((0.7, 0.4, -0.5), abs=0.05)


def test_a_useless_second_model_gets_no_weight() -> None:
    rng = np.random.default_rng(1)
    z1 = rng.normal(0, 1.0, 20_000)
    y = (rng.random(20_000) < _sigmoid(z1)).astype(np.int8)
    got = fit_blend(_sigmoid(z1), rng.random(20_000), y)
    assert got.a == pytest.approx(1.0, abs=0.06) and abs(got.b) < 0.05


def test_prob_is_the_sigmoid_of_the_blended_logits() -> None:
    p1, p2 = np.array([0.2, 0.5, 0.9]), np.array([0.6, 0.1, 0.5])
    b = Blend(0.5, 2.0, -1.0)
    want = _sigmoid(0.5 * logit(p1) + 2.0 * logit(p2) - 1.0)
    np.testing.assert_allclose(b.prob(p1, p2), want, rtol=1e-6)
    assert b.prob(p1, p2).dtype == np.float32
    # certain predictions stay finite
    assert np.isfinite(b.prob(np.array([0.0, 1.0]), np.array([1.0, 0.0]))).all()


def test_no_validation_rows_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="validation row"):
        fit_blend(np.zeros(0), np.zeros(0), np.zeros(0))
