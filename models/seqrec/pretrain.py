"""The FM's self-supervised pretraining: next-interaction prediction over every user's sequence.

Each training window is up to ``history_len`` steps of a user's training part; with the causal
blocks every position predicts the step after it (SASRec's objective, on the FM's own tokens:
item, liked-or-not and time gap before the window's prediction point). The loss is a softmax
over the whole vocabulary, or over ``negatives`` uniformly sampled items (shared by the batch)
when the vocabulary is larger. Training stops when validation NDCG@10 (each user's
second-to-last step, full ranking) has not improved for ``patience`` epochs; the best epoch's
weights are kept.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from models.fm import FoundationModel
from models.seqrec.ranking import hit_rate, ndcg, target_ranks
from models.seqrec.sequences import FIRST_ITEM, Sequences, final_targets, split_points, window
from models.train import seed_everything

log = logging.getLogger(__name__)
Report = Callable[[str], None]
K = 10  #: the cut-off of the yardstick's metrics


@dataclass(frozen=True)
class PretrainConfig:
    """Size and schedule of the pretrained FM (defaults: the benchmark's FM)."""

    history_len: int = 200
    item_dim: int = 64
    layers: int = 2
    heads: int = 2
    hidden: int = 128
    dim: int = 64
    dropout: float = 0.2
    batch_users: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.0
    negatives: int = 2048  #: sampled softmax above this vocabulary size, else the full one
    newest_share: float = 0.5  #: windows ending at the newest training step (else anywhere)
    max_epochs: int = 200
    patience: int = 10
    seed: int = 0
    threads: int = 2


@dataclass
class Pretrained:
    """A pretrained FM and how its training went."""

    model: FoundationModel
    config: PretrainConfig
    parameters: int
    epochs: int
    best_epoch: int
    train_seconds: float
    valid: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        return {
            "config": asdict(self.config),
            "parameters": self.parameters,
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "train_seconds": round(self.train_seconds, 1),
            "valid": self.valid,
        }


def build_fm(n_items: int, cfg: PretrainConfig) -> FoundationModel:
    """The FM with causal blocks and recency positions, as pretraining needs it."""
    return FoundationModel(
        n_items,
        item_dim=cfg.item_dim,
        hidden=cfg.hidden,
        dim=cfg.dim,
        heads=cfg.heads,
        dropout=cfg.dropout,
        layers=cfg.layers,
        causal=True,
        max_len=cfg.history_len,
    )


def _tensors(batch: object) -> tuple[torch.Tensor, ...]:
    return tuple(
        torch.from_numpy(getattr(batch, k))
        for k in ("hist_item", "hist_label", "hist_gap", "target")
    )


def sequence_loss(
    model: FoundationModel, batch: object, negatives: int, rng: np.random.Generator
) -> torch.Tensor:
    """Mean next-step cross-entropy over the batch's real positions."""
    item, label, gap, target = _tensors(batch)
    mask = (label > 0).to(torch.float32)
    tokens = model.dropout(model.tokens(item, label, gap, mask))
    where = (target > 0) & (label > 0)
    picked = tokens[where]
    if model.seq_norm is not None:
        picked = model.seq_norm(picked)
    h = model.user_proj(picked)  # [N, D]
    y = target[where]
    n_items = model.item.num_embeddings
    if n_items - FIRST_ITEM <= negatives:
        scores = h @ model.item.weight.T
        scores[:, :FIRST_ITEM] = float("-inf")
        return nn.functional.cross_entropy(scores, y)
    sampled = torch.from_numpy(rng.integers(FIRST_ITEM, n_items, negatives))
    pos = (h * model.item(y)).sum(-1, keepdim=True)  # [N, 1]
    neg = h @ model.item(sampled).T  # [N, K]
    neg = neg.masked_fill(sampled[None, :] == y[:, None], float("-inf"))
    logits = torch.cat([pos, neg], dim=1)
    return nn.functional.cross_entropy(logits, torch.zeros(len(y), dtype=torch.long))


@torch.no_grad()
def rank_targets(
    model: FoundationModel, seqs: Sequences, ends: np.ndarray, length: int, batch: int = 256
) -> np.ndarray:
    """Full-ranking rank of step ``ends[u]`` of every user, from the steps before it."""
    model.eval()
    ranks = []
    users = np.arange(len(seqs))
    for s in range(0, len(users), batch):
        b = window(seqs, users[s : s + batch], ends[s : s + batch], length)
        item, label, gap, _ = _tensors(b)
        mask = (label > 0).to(torch.float32)
        tokens = model.tokens(item, label, gap, mask)
        scores = model.next_item_scores(tokens[:, -1:, :])[:, 0, :].numpy()
        scores[:, :FIRST_ITEM] = -np.inf
        ranks.append(target_ranks(scores, final_targets(b)))
    return np.concatenate(ranks) if ranks else np.zeros(0, np.int64)


def metrics(ranks: np.ndarray) -> dict[str, float]:
    return {f"hr@{K}": hit_rate(ranks, K), f"ndcg@{K}": ndcg(ranks, K)}


def _train_ends(seqs: Sequences, rng: np.random.Generator, newest_share: float) -> np.ndarray:
    """Each user's window end for one epoch: the newest training step (index len − 3) or,
    with probability ``1 − newest_share``, any training step after the first."""
    newest = np.array([s.shape[0] - 3 for s in seqs.items], np.int64)
    anywhere = np.floor(rng.random(len(newest)) * newest).astype(np.int64) + 1
    pick_newest = (rng.random(len(newest)) < newest_share) | (newest < 1)
    return np.where(pick_newest, newest, np.minimum(anywhere, newest))


def pretrain(seqs: Sequences, cfg: PretrainConfig, report: Report | None = None) -> Pretrained:
    """Pretrain the FM on every user's training steps; early stopping on validation NDCG@10."""
    seed_everything(cfg.seed, cfg.threads)
    rng = np.random.default_rng(cfg.seed)
    model = build_fm(seqs.n_items, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    valid_ends, _ = split_points(seqs)
    eligible = np.array([s.shape[0] >= 4 for s in seqs.items])  # at least one training target
    best, best_state, best_epoch, bad = -1.0, copy.deepcopy(model.state_dict()), 0, 0
    best_valid: dict[str, float] = {}
    t0 = time.monotonic()
    epoch = 0
    for epoch in range(1, cfg.max_epochs + 1):
        model.train()
        ends = _train_ends(seqs, rng, cfg.newest_share)
        users = rng.permutation(np.flatnonzero(eligible))
        total, n = 0.0, 0
        for s in range(0, len(users), cfg.batch_users):
            part = users[s : s + cfg.batch_users]
            loss = sequence_loss(
                model, window(seqs, part, ends[part], cfg.history_len), cfg.negatives, rng
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + float(loss.detach()), n + 1
        valid = metrics(rank_targets(model, seqs, valid_ends, cfg.history_len))
        if report:
            report(
                f"fm pretrain epoch {epoch}: loss {total / max(n, 1):.4f}, valid "
                f"HR@{K} {valid[f'hr@{K}']:.4f} NDCG@{K} {valid[f'ndcg@{K}']:.4f} "
                f"({time.monotonic() - t0:.0f} s)"
            )
        if valid[f"ndcg@{K}"] > best + 1e-5:
            best, best_state, best_epoch, bad = (
                valid[f"ndcg@{K}"],
                copy.deepcopy(model.state_dict()),
                epoch,
                0,
            )
            best_valid = valid
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    return Pretrained(model, cfg, n_params, epoch, best_epoch, time.monotonic() - t0, best_valid)
