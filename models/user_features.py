"""Cheap streaming user features: what a production VM knows at request time without the FM.

Issue 22: against an id-only VM, any vector that summarises the user's history looks like FM
knowledge. A VM a team would actually ship reads the user's recent interactions (the history the
pipeline already keeps for the FM) and turns them into a few numbers and a pooled item vector.
This module computes those inputs, numpy only, from a batch of histories cut strictly before
each row's event time (``models.features.RawHistory``), so training and serving get the same
values from the same code.

Inputs of a VM with user features (ONNX names):

- ``user_stats`` float32 [N, len(USER_STATS)], each in [0, 1] (see ``USER_STATS``);
- ``recent_pos`` int64 [N, RECENT_K]: the VM item-vocabulary indices of the user's last
  ``RECENT_K`` engaged items, newest last, left-padded with ``PAD``. The VM pools its own item
  embeddings of them (no FM involved).
"""

from __future__ import annotations

import numpy as np

from models.features import HOUR_MS, MINUTE_MS, PAD, RawHistory, Vocab

#: names of the ``user_stats`` columns, in order
USER_STATS: tuple[str, ...] = (
    "has_history",  # 1 if the user has any impression before the event
    "count",  # log1p(n) / log1p(L), n = impressions in the kept history
    "positive_rate",  # (engaged + 1) / (n + 2)
    "since_last",  # log1p(minutes since the last impression), scaled to [0, 1]; 1 if none
    "since_positive",  # the same for the last engaged impression
    "count_1h",  # impressions in the last hour / L
    "count_24h",  # impressions in the last 24 h / L
    "recent_positive_rate",  # (engaged + 1) / (n + 2) over the last RECENT_WINDOW impressions
    "target_seen",  # the candidate is in the kept history
    "target_engaged",  # ... with a positive label
)
N_USER_STATS = len(USER_STATS)
RECENT_K = 10  # engaged items pooled into the VM's user vector
RECENT_WINDOW = 5  # impressions behind recent_positive_rate
_MINUTES_SCALE = float(np.log1p(365 * 24 * 60))  # a year of minutes maps to 1.0


def _log_minutes(gap_ms: np.ndarray, present: np.ndarray) -> np.ndarray:
    minutes = np.maximum(gap_ms, 0) / MINUTE_MS
    scaled = np.minimum(np.log1p(minutes) / _MINUTES_SCALE, 1.0)
    return np.where(present, scaled, 1.0)


def _last_true_time(times: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time of the newest entry where ``rows`` is True (histories are oldest first)."""
    any_row = np.asarray(rows.any(axis=1), bool)
    stamps = np.where(rows, times, np.iinfo(np.int64).min).max(axis=1)
    return np.where(any_row, stamps, 0), any_row


def recent_positive_items(item_vocab: Vocab, history: RawHistory, k: int = RECENT_K) -> np.ndarray:
    """int64 [N, k]: vocabulary indices of each row's last ``k`` engaged items, newest last."""
    positive = history.mask & (history.labels == 1)
    n, length = positive.shape
    out = np.full((n, k), PAD, np.int64)
    if n == 0 or length == 0 or k == 0:
        return out
    # rank from the newest engaged entry: 1 for the newest, 2 for the one before, ...
    rank = np.cumsum(positive[:, ::-1], axis=1)[:, ::-1]
    keep = positive & (rank <= k)
    rows, cols = np.nonzero(keep)
    out[rows, k - rank[rows, cols]] = item_vocab.lookup(history.items[rows, cols])
    return out


def user_stats(
    target_items: np.ndarray, reference_ms: np.ndarray, history: RawHistory
) -> np.ndarray:
    """float32 [N, N_USER_STATS] (columns named by ``USER_STATS``) as of ``reference_ms``.

    ``history`` must already be cut strictly before each row's reference time.
    """
    mask = history.mask
    n_rows, length = mask.shape
    if n_rows == 0:
        return np.zeros((0, N_USER_STATS), np.float32)
    scale = max(length, 1)
    positive = mask & (history.labels == 1)
    ref = np.asarray(reference_ms, np.int64)
    gap = ref[:, None] - history.times_ms
    n = mask.sum(axis=1)
    pos = positive.sum(axis=1)
    last_t, has = _last_true_time(history.times_ms, mask)
    last_pos_t, has_pos = _last_true_time(history.times_ms, positive)
    window = slice(max(length - RECENT_WINDOW, 0), length)  # left-padded: newest at the end
    n_recent = mask[:, window].sum(axis=1)
    pos_recent = positive[:, window].sum(axis=1)
    target = np.asarray(target_items, np.int64)[:, None]
    same = mask & (history.items == target)
    cols = (
        has.astype(np.float64),
        np.log1p(n) / np.log1p(scale),
        (pos + 1.0) / (n + 2.0),
        _log_minutes(ref - last_t, has),
        _log_minutes(ref - last_pos_t, has_pos),
        (mask & (gap < HOUR_MS)).sum(axis=1) / scale,
        (mask & (gap < 24 * HOUR_MS)).sum(axis=1) / scale,
        (pos_recent + 1.0) / (n_recent + 2.0),
        same.any(axis=1).astype(np.float64),
        (same & positive).any(axis=1).astype(np.float64),
    )
    return np.stack(cols, axis=1).astype(np.float32)


def user_stream_inputs(
    item_vocab: Vocab,
    target_items: np.ndarray,
    reference_ms: np.ndarray,
    history: RawHistory,
    k: int = RECENT_K,
) -> dict[str, np.ndarray]:
    """The VM's user-feature tensors by ONNX input name (``user_stats``, ``recent_pos``)."""
    return {
        "user_stats": user_stats(target_items, reference_ms, history),
        "recent_pos": recent_positive_items(item_vocab, history, k),
    }
