"""NE/AUC of ``vm_solaris`` on test-period impressions under the tiers the pipeline achieved.

Rows are collected while the simulation runs (the embedding *as served*, computed at speculation
time with the history known then) and scored in batches at the end, next to the plain VM and the
FM (fresh history) on the same impressions, so the transfer ratio at achieved coverage is
``(NE_vm - NE_solaris) / (NE_vm - NE_fm)`` on one test set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store.tiers import TIER_NAMES, Tier
from streams.engine.embedder import EmbeddingModel
from streams.engine.history import UserHistory
from streams.engine.ranker import SolarisScorer, reads_history
from streams.engine.verifier import HistoryPairScorer, PairScorer


def log_loss(labels: np.ndarray, probs: np.ndarray) -> float:
    p = np.clip(probs.astype(np.float64), 1e-7, 1 - 1e-7)
    y = labels.astype(np.float64)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def normalized_entropy(labels: np.ndarray, probs: np.ndarray) -> float:
    """Log-loss divided by the entropy of the base rate (1.0 = predicting the base rate)."""
    base = float(np.clip(labels.mean(), 1e-7, 1 - 1e-7))
    return log_loss(labels, probs) / log_loss(labels, np.full(len(labels), base))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC via the rank-sum statistic (ties get average ranks)."""
    y = labels.astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), np.float64)
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@dataclass(slots=True)
class EvalRows:
    dim: int
    users: list[int] = field(default_factory=list)
    items: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    tiers: list[int] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    histories: list[UserHistory] = field(default_factory=list)

    def add(
        self,
        user: int,
        item: int,
        t: int,
        label: int,
        tier: int,
        vector: np.ndarray,
        history: UserHistory,
    ) -> None:
        self.users.append(user)
        self.items.append(item)
        self.times.append(t)
        self.labels.append(label)
        self.tiers.append(tier)
        self.vectors.append(vector)
        self.histories.append(history)

    def __len__(self) -> int:
        return len(self.labels)

    def predict(
        self,
        vm: PairScorer,
        fm: EmbeddingModel,
        solaris: SolarisScorer,
        batch: int = 4096,
        vm_fair: HistoryPairScorer | None = None,
    ) -> Predictions:
        """Probabilities of vm, fm (fresh history) and vm_solaris (as served) on every row, and
        of the fair VM (reads the histories) when given."""
        n = len(self)
        users, items, times = (
            np.asarray(x, np.int64) for x in (self.users, self.items, self.times)
        )
        tiers = np.asarray(self.tiers, np.uint8)
        vectors = np.stack(self.vectors) if n else np.zeros((0, self.dim), np.float32)
        p_vm, p_fm, p_sol = (np.zeros(n, np.float32) for _ in range(3))
        p_fair = None if vm_fair is None else np.zeros(n, np.float32)
        for s in range(0, n, batch):
            e = min(n, s + batch)
            p_vm[s:e] = vm.score(users[s:e], items[s:e], times[s:e])
            if vm_fair is not None and p_fair is not None:
                p_fair[s:e] = vm_fair.score(
                    users[s:e], items[s:e], times[s:e], histories=self.histories[s:e]
                )
            _, logits = fm.embed(users[s:e], items[s:e], times[s:e], self.histories[s:e])
            p_fm[s:e] = 1.0 / (1.0 + np.exp(-logits))
            fair = {"histories": self.histories[s:e]} if reads_history(solaris) else {}
            p_sol[s:e] = solaris.score(
                users[s:e], items[s:e], times[s:e], vectors[s:e], tiers[s:e], **fair
            )
        labels = np.asarray(self.labels, np.int8)
        return Predictions(labels, tiers, p_vm, p_fm, p_sol, p_fair, np.asarray(users))

    def score(
        self, vm: PairScorer, fm: EmbeddingModel, solaris: SolarisScorer, batch: int = 4096
    ) -> dict[str, dict[str, float]]:
        """NE/AUC/logloss of vm, fm and vm_solaris (as served) on the collected rows."""
        return self.predict(vm, fm, solaris, batch).metrics()


@dataclass(frozen=True, slots=True)
class Predictions:
    """The three models' probabilities on the evaluation rows, with each row's served tier."""

    labels: np.ndarray
    tiers: np.ndarray
    vm: np.ndarray
    fm: np.ndarray
    solaris: np.ndarray
    #: the fair VM's probabilities (None: no fair VM was given)
    vm_fair: np.ndarray | None = None
    #: each row's user (the bootstrap resamples users)
    users: np.ndarray | None = None

    def models(self) -> dict[str, np.ndarray]:
        out = {"vm": self.vm, "fm": self.fm, "vm_solaris_achieved": self.solaris}
        if self.vm_fair is not None:
            out["vm_fair"] = self.vm_fair
        return out

    def metrics(self) -> dict[str, dict[str, float]]:
        """NE/AUC/logloss of each model over all rows."""
        return {
            name: {
                "logloss": log_loss(self.labels, p),
                "ne": normalized_entropy(self.labels, p),
                "auc": auc(self.labels, p),
            }
            for name, p in self.models().items()
        }

    def transfer_by_tier(self, baseline: str = "vm") -> dict[str, dict[str, float]]:
        """Where the transfer ratio comes from, per served tier.

        NE is log-loss over the base rate's entropy, so the overall transfer ratio is
        ``(LL_vm - LL_solaris) / (LL_vm - LL_fm)`` and splits exactly into per-tier parts:
        ``contribution`` = the tier's rows' log-loss gain over the plain VM, weighted by their
        share, divided by the overall FM gain (contributions sum to the overall ratio).
        ``transfer_ratio`` is the same ratio within the tier's rows (what that tier keeps of
        the FM's gain there). Tiers with no rows are left out. ``baseline``: "vm" or "vm_fair".
        """
        base = self.models()[baseline]
        gap = log_loss(self.labels, base) - log_loss(self.labels, self.fm)
        out: dict[str, dict[str, float]] = {}
        n = len(self.labels)
        for tier in Tier:
            rows = self.tiers == tier
            k = int(rows.sum())
            if not k:
                continue
            y = self.labels[rows]
            ll_vm, ll_fm, ll_sol = (log_loss(y, p[rows]) for p in (base, self.fm, self.solaris))
            local_gap = ll_vm - ll_fm
            out[TIER_NAMES[tier]] = {
                "share": k / n,
                "transfer_ratio": (ll_vm - ll_sol) / local_gap if local_gap else 0.0,
                "contribution": (k / n) * (ll_vm - ll_sol) / gap if gap else 0.0,
            }
        return out
