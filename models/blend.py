"""A two-model logit blend, fitted on the VMs' validation rows (issue 22).

Why: the served VM and tuned KD carry the FM's knowledge through different channels (features
vs soft labels) and each wins on a different dataset (ml-100k: the served VM, which beats the
FM; Taobao: KD). Training one VM with both losses (``vm_solaris_engine_kd``) chooses its KD
weight on the same small validation slice by retraining, and pulled ml-100k's served VM back.
A blend ``σ(a·z_served + b·z_kd + c)`` has three parameters, fitted by logistic regression on
the validation rows both models already score: cheap, low-variance, and it can lean on
whichever channel the data rewards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: probabilities are clipped to this before taking logits (onnxruntime's float32 sigmoid)
EPS = 1e-6


@dataclass(frozen=True)
class Blend:
    """Weights of ``z = a·z_first + b·z_second + c`` on the two models' logits."""

    a: float
    b: float
    c: float

    def logit(self, z_first: np.ndarray, z_second: np.ndarray) -> np.ndarray:
        return self.a * z_first + self.b * z_second + self.c

    def prob(self, p_first: np.ndarray, p_second: np.ndarray) -> np.ndarray:
        """Blend two models' probabilities; float32 like every model output."""
        return sigmoid(self.logit(logit(p_first), logit(p_second))).astype(np.float32)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """σ(z) without overflow for large |z|."""
    return np.exp(-np.logaddexp(0.0, -z))


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(np.asarray(p, np.float64), EPS, 1.0 - EPS)
    return np.log(q) - np.log1p(-q)


def fit_blend(
    p_first: np.ndarray, p_second: np.ndarray, y: np.ndarray, l2: float = 1e-3, iters: int = 50
) -> Blend:
    """Logistic regression of ``y`` on the two logits (Newton's method, a small ridge on the
    weights, not the intercept). Starts at "the first model alone" (a=1, b=0, c=0)."""
    if len(y) == 0:
        raise ValueError("fit_blend needs at least one validation row")
    x = np.stack([logit(p_first), logit(p_second), np.ones(len(y))], axis=1)
    t = np.asarray(y, np.float64)
    w = np.array([1.0, 0.0, 0.0])
    ridge = np.diag([l2, l2, 0.0]) * len(y)
    for _ in range(iters):
        p = sigmoid(x @ w)
        grad = x.T @ (p - t) + ridge @ w
        hess = (x * (p * (1.0 - p))[:, None]).T @ x + ridge + 1e-9 * np.eye(3)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return Blend(float(w[0]), float(w[1]), float(w[2]))
