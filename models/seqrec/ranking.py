"""Full-ranking metrics of next-item prediction: every item is a candidate (none sampled)."""

from __future__ import annotations

import numpy as np


def target_ranks(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """0-based rank of each row's target among the row's scores [B, n_items]: how many items
    score strictly higher (columns that are not items must hold ``-inf``)."""
    rows = np.arange(scores.shape[0])
    target_score = scores[rows, targets]
    return (scores > target_score[:, None]).sum(axis=1).astype(np.int64)


def hit_rate(ranks: np.ndarray, k: int) -> float:
    """HR@k: share of rows whose target is in the top k."""
    return float(np.mean(ranks < k)) if ranks.size else 0.0


def ndcg(ranks: np.ndarray, k: int) -> float:
    """NDCG@k with one relevant item per row: 1 / log2(rank + 2) inside the top k, else 0."""
    if not ranks.size:
        return 0.0
    gains = np.where(ranks < k, 1.0 / np.log2(ranks + 2.0), 0.0)
    return float(np.mean(gains))
