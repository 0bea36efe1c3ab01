"""Offline metrics: log-loss, normalized entropy (NE), AUC, transfer ratio, user bootstrap.

Definitions (design §4):

- ``logloss`` = mean binary cross-entropy, predictions clipped to ``[EPS, 1 − EPS]``.
- ``NE`` = logloss / H(p̄), with p̄ the base rate (label mean) *of the evaluated set*: the
  base-rate predictor scores exactly 1, so NE < 1 means the model learned something.
- ``AUC`` = Mann–Whitney statistic with ties counted half.
- ``TR`` = (NE_vm − NE_x) / (NE_vm − NE_fm) (LoopFM/ExFM convention).

Small NE differences are noise-prone and a few heavy users dominate small test sets, so
intervals come from a bootstrap that resamples *users*, not rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

EPS = 1e-7


def logloss(labels: np.ndarray, probs: np.ndarray) -> float:
    """Mean binary cross-entropy (natural log)."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1 - EPS)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def entropy(rate: float) -> float:
    """Binary entropy (nats) of a base rate; 0 for a degenerate rate."""
    p = min(max(rate, EPS), 1 - EPS)
    return float(-(p * np.log(p) + (1 - p) * np.log(1 - p)))


def normalized_entropy(labels: np.ndarray, probs: np.ndarray) -> float:
    """Log-loss divided by the entropy of the evaluated set's base rate."""
    return logloss(labels, probs) / entropy(float(np.mean(labels)))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve; NaN when only one class is present."""
    y = np.asarray(labels).astype(bool)
    s = np.asarray(scores, dtype=np.float64)
    n_pos = int(y.sum())
    n_neg = int(y.shape[0] - n_pos)
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    s_sorted = s[order]
    ranks = np.empty(s.shape[0], dtype=np.float64)
    # average ranks over ties
    boundaries = np.flatnonzero(np.diff(s_sorted)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [s.shape[0]]])
    avg = (starts + ends + 1) / 2.0  # 1-based average rank of each tie group
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def transfer_ratio(ne_vm: float, ne_x: float, ne_fm: float) -> float:
    """Share of the FM's NE gain over the VM that variant ``x`` keeps; NaN if there is no gap."""
    gap = ne_vm - ne_fm
    if abs(gap) < 1e-12:
        return float("nan")
    return (ne_vm - ne_x) / gap


def headroom_closure(tr_served: float, tr_kd: float) -> float:
    """h = (TR_served − TR_kd) / (1 − TR_kd): the share of what soft-label KD leaves on the table
    that SOLARIS recovers (design §4); NaN when KD already keeps all of the FM's gain."""
    if not np.isfinite(tr_served) or not np.isfinite(tr_kd) or abs(1.0 - tr_kd) < 1e-12:
        return float("nan")
    return (tr_served - tr_kd) / (1.0 - tr_kd)


def summary(labels: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    """``{"logloss", "ne", "auc"}`` of one prediction vector."""
    return {
        "logloss": logloss(labels, probs),
        "ne": normalized_entropy(labels, probs),
        "auc": auc(labels, probs),
    }


@dataclass(frozen=True)
class BootstrapResult:
    """Percentile intervals of seed-averaged NE per model and of TR per variant."""

    ne_interval: dict[str, tuple[float, float]]
    tr_interval: dict[str, tuple[float, float]]
    gap_interval: tuple[float, float]  # NE_vm − NE_fm
    replicates: int
    #: paired: NE(a) − NE(b) per replicate, same resampled users for both (``diff_pairs``)
    diff_interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: headroom closure h per replicate (``headroom_pairs``: name → (served model, kd model))
    headroom_interval: dict[str, tuple[float, float]] = field(default_factory=dict)


def user_bootstrap(
    user_ids: np.ndarray,
    labels: np.ndarray,
    probs: Mapping[str, list[np.ndarray]],
    tr_pairs: Mapping[str, str],
    vm: str = "vm",
    fm: str = "fm",
    replicates: int = 1000,
    seed: int = 0,
    diff_pairs: Mapping[str, tuple[str, str]] | None = None,
    headroom_pairs: Mapping[str, tuple[str, str]] | None = None,
) -> BootstrapResult:
    """Resample users with replacement; per replicate compute each model's NE averaged over seeds.

    ``probs[name]`` holds one prediction vector per seed (all aligned with ``labels``);
    ``tr_pairs`` maps a TR name to the model it measures (e.g. ``{"solaris": "vm_solaris"}``).
    Per-user sums make a replicate O(users), so 1000 replicates take well under a second.
    """
    users, inv = np.unique(np.asarray(user_ids), return_inverse=True)
    n_users = users.shape[0]
    y = np.asarray(labels, dtype=np.float64)
    count_u = np.bincount(inv, minlength=n_users).astype(np.float64)
    pos_u = np.bincount(inv, weights=y, minlength=n_users)
    loss_u: dict[str, np.ndarray] = {}
    for name, per_seed in probs.items():
        rows = []
        for p in per_seed:
            pc = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
            ll = -(y * np.log(pc) + (1 - y) * np.log(1 - pc))
            rows.append(np.bincount(inv, weights=ll, minlength=n_users))
        loss_u[name] = np.stack(rows)  # [seeds, users]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n_users, np.full(n_users, 1.0 / n_users), size=replicates)
    weights = weights.astype(np.float64)  # [R, users]
    n = weights @ count_u
    rate = np.clip((weights @ pos_u) / n, EPS, 1 - EPS)
    h = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))
    ne = {name: ((weights @ lu.T) / n[:, None]).mean(axis=1) / h for name, lu in loss_u.items()}

    def interval(x: np.ndarray) -> tuple[float, float]:
        x = x[np.isfinite(x)]
        if x.size == 0:
            return (float("nan"), float("nan"))
        lo, hi = np.percentile(x, [2.5, 97.5])
        return (float(lo), float(hi))

    gap = ne[vm] - ne[fm]
    safe_gap = np.where(np.abs(gap) < 1e-12, np.nan, gap)
    tr_of = {key: (ne[vm] - ne[model]) / safe_gap for key, model in tr_pairs.items() if model in ne}
    diffs = {
        key: interval(ne[a] - ne[b])
        for key, (a, b) in (diff_pairs or {}).items()
        if a in ne and b in ne
    }
    headroom = {}
    for key, (served, kd) in (headroom_pairs or {}).items():
        if served in ne and kd in ne:
            tr_s, tr_k = (ne[vm] - ne[served]) / safe_gap, (ne[vm] - ne[kd]) / safe_gap
            rest = np.where(np.abs(1.0 - tr_k) < 1e-12, np.nan, 1.0 - tr_k)
            headroom[key] = interval((tr_s - tr_k) / rest)
    return BootstrapResult(
        ne_interval={name: interval(v) for name, v in ne.items()},
        tr_interval={key: interval(v) for key, v in tr_of.items()},
        gap_interval=interval(gap),
        replicates=replicates,
        diff_interval=diffs,
        headroom_interval=headroom,
    )
