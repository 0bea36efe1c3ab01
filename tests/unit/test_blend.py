"""models.blend: a convex blend of two models' logits, its weight chosen on validation."""

from __future__ import annotations

import numpy as np
import pytest

from models.blend import Blend, fit_blend, logit, sigmoid


def _world(w: float, n: int = 30_000, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Two models' probabilities and labels drawn from σ(w·z1 + (1 − w)·z2)."""
    rng = np.random.default_rng(seed)
    z1, z2 = rng.normal(-1, 1.5, n), rng.normal(-1, 1.5, n)
    y = (rng.random(n) < sigmoid(w * z1 + (1 - w) * z2)).astype(np.int8)
    return sigmoid(z1), sigmoid(z2), y


@pytest.mark.parametrize("w", [0.0, 0.3, 0.5, 1.0])
def test_fit_finds_the_weight_that_made_the_labels(w: float) -> None:
    p1, p2, y = _world(w)
    got = fit_blend(p1, p2, y)
    assert got.a == pytest.approx(w, abs=0.051)
    assert got.b == pytest.approx(1 - got.a) and got.c == 0.0


def test_the_weights_never_rescale_the_logits() -> None:
    """A model whose logits barely vary cannot be amplified (the free 3-parameter fit did
    that on Taobao's validation rows: weights 5.5, intercept 9)."""
    rng = np.random.default_rng(2)
    y = (rng.random(5_000) < 0.11).astype(np.int8)
    flat = sigmoid(-2.0 + 0.01 * rng.normal(size=5_000) + 0.05 * y)  # tiny but informative
    noise = rng.random(5_000)
    got = fit_blend(noise, flat, y)
    assert 0.0 <= got.a <= 1.0 and got.a + got.b == pytest.approx(1.0) and got.c == 0.0
    assert got.a == pytest.approx(0.0, abs=0.051)  # the noise model gets (almost) no weight


def test_prob_is_the_sigmoid_of_the_blended_logits() -> None:
    p1, p2 = np.array([0.2, 0.5, 0.9]), np.array([0.6, 0.1, 0.5])
    b = Blend(0.25, 0.75, 0.0)
    want = 1.0 / (1.0 + np.exp(-(0.25 * logit(p1) + 0.75 * logit(p2))))
    np.testing.assert_allclose(b.prob(p1, p2), want, rtol=1e-6)
    assert b.prob(p1, p2).dtype == np.float32
    # certain predictions stay finite
    assert np.isfinite(b.prob(np.array([0.0, 1.0]), np.array([1.0, 0.0]))).all()


def test_no_validation_rows_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="validation row"):
        fit_blend(np.zeros(0), np.zeros(0), np.zeros(0))
