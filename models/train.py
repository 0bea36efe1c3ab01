"""FM training (torch, CPU, seeded) and the helpers both trainers share.

``train_fm``: minibatch Adam on period A, early stopping on A's tail (Δ = 0). A share of the
training examples sees a randomly stale history (``TrainConfig.fm_lag_share``) so the FM learns
what survives staleness (design §7). VM training lives in ``models.train_vm``.
"""

from __future__ import annotations

import copy
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.config import MINUTE_MS, TrainConfig
from models.features import HistoryIndex, Vocab, fm_inputs
from models.fm import FoundationModel
from models.metrics import logloss

log = logging.getLogger(__name__)
Report = Callable[[str], None]


def seed_everything(seed: int, threads: int) -> None:
    """Same seed → same model (on one machine); threads capped for the shared 2-core box."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, threads))


def bce() -> nn.BCEWithLogitsLoss:
    return nn.BCEWithLogitsLoss()


# --- FM --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Examples:
    """Labelled impressions of one slice (numpy, aligned)."""

    user: np.ndarray  # int64 [N]
    item: np.ndarray  # int64 [N]
    time_ms: np.ndarray  # int64 [N]
    label: np.ndarray  # int8 [N]

    def take(self, idx: np.ndarray) -> Examples:
        return Examples(self.user[idx], self.item[idx], self.time_ms[idx], self.label[idx])

    def __len__(self) -> int:
        return int(self.label.shape[0])


def fm_batch_inputs(
    vocab: Vocab, index: HistoryIndex, ex: Examples, lag_ms: np.ndarray, length: int
) -> dict[str, np.ndarray]:
    """FM inputs as served with staleness ``lag_ms``: history and time gaps as of t − Δ."""
    reference = ex.time_ms - lag_ms
    hist = index.gather(ex.user, reference, length)
    return fm_inputs(vocab, ex.item, reference, hist)


def to_torch(inputs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}


@torch.no_grad()
def predict_fm(
    model: FoundationModel, inputs: dict[str, np.ndarray], batch: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings float32 [N, d] and logits float32 [N]."""
    model.eval()
    n = next(iter(inputs.values())).shape[0]
    embs, logits = [], []
    for s in range(0, n, batch):
        part = to_torch({k: v[s : s + batch] for k, v in inputs.items()})
        e, z = model(**part)
        embs.append(e.numpy())
        logits.append(z.numpy())
    dim = model.head.in_features
    if not embs:
        return np.zeros((0, dim), np.float32), np.zeros(0, np.float32)
    return np.concatenate(embs).astype(np.float32), np.concatenate(logits).astype(np.float32)


def _sample_lags(rng: np.random.Generator, n: int, cfg: TrainConfig) -> np.ndarray:
    stale = rng.random(n) < cfg.fm_lag_share
    lo, hi = math.log(MINUTE_MS), math.log(max(cfg.fm_max_lag_ms, MINUTE_MS + 1))
    lags = np.exp(rng.uniform(lo, hi, n)).astype(np.int64)
    return np.where(stale, lags, 0)


def train_fm(
    cfg: TrainConfig,
    vocab: Vocab,
    index: HistoryIndex,
    train: Examples,
    valid: Examples,
    seed: int,
    report: Report | None = None,
) -> FoundationModel:
    """Train the FM on period A; returns the best model by validation log-loss (Δ = 0)."""
    seed_everything(seed, cfg.threads)
    rng = np.random.default_rng(seed)
    model = FoundationModel(
        vocab.size,
        cfg.fm_item_dim,
        cfg.fm_hidden,
        cfg.embedding_dim,
        cfg.fm_heads,
        cfg.fm_dropout,
        cfg.fm_self_attention,
    )
    opt = torch.optim.Adam(model.parameters(), lr=cfg.fm_lr, weight_decay=cfg.fm_weight_decay)
    valid_in = fm_batch_inputs(vocab, index, valid, np.zeros(len(valid), np.int64), cfg.history_len)
    best, best_state, bad = float("inf"), copy.deepcopy(model.state_dict()), 0
    loss_fn = bce()
    for epoch in range(cfg.fm_epochs):
        model.train()
        lags = _sample_lags(rng, len(train), cfg)
        inputs = to_torch(fm_batch_inputs(vocab, index, train, lags, cfg.history_len))
        y = torch.from_numpy(train.label.astype(np.float32))
        perm = torch.from_numpy(rng.permutation(len(train)))
        for s in range(0, len(train), cfg.fm_batch):
            b = perm[s : s + cfg.fm_batch]
            _, z, next_item = model.encode(**{k: v[b] for k, v in inputs.items()})
            loss = loss_fn(z, y[b])
            if cfg.fm_next_item_weight > 0:
                # duplicate items in a batch make some "negatives" positives: harmless noise
                aim = torch.arange(next_item.shape[0])
                loss = loss + cfg.fm_next_item_weight * nn.functional.cross_entropy(next_item, aim)
            opt.zero_grad()
            loss.backward()
            opt.step()
        _, zv = predict_fm(model, valid_in)
        ll = logloss(valid.label, 1 / (1 + np.exp(-zv)))
        if report:
            report(f"fm seed {seed} epoch {epoch + 1}/{cfg.fm_epochs}: valid logloss {ll:.4f}")
        if ll < best - 1e-4:
            best, best_state, bad = ll, copy.deepcopy(model.state_dict()), 0
        else:
            bad += 1
            if bad > cfg.fm_patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    return model
