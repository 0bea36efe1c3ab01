"""Offline stand-ins for the store's lower tiers, used to train and evaluate ``vm_solaris``.

The streaming pipeline serves, per (user, item) lookup, the first of: exact pair embedding,
user aggregate, neighbours' embedding, missing (design §2.5). Offline we rebuild the same
values from the FM's pair embeddings of impressions (the pairs a pipeline would have embedded):

- **aggregate**: mean of the user's pair embeddings with event time in ``[t − W, t)``
  (W = 24 h); only pairs the FM did not train on (periods B and C) are counted.
- **neighbours** (proxy): mean of the ``k`` latest embeddings of the *same item* for *other*
  users within ``[t − W, t)``. The store weights neighbours by user similarity; uniform weights
  over recent co-raters are a cruder imitation, so this tier is, if anything, pessimistic.

Both only read rows strictly before ``t`` (no leakage). Rows with nothing to average have the
tier marked unavailable, and training falls through to the next tier.
"""

from __future__ import annotations

import numpy as np


def _sorted_keys(group: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Order by (group, time) and integer keys ``group_rank * span + (time − t0 + 1)``."""
    order = np.lexsort((times, group))
    t0 = int(times.min())
    span = int(times.max()) - t0 + 3
    _, dense = np.unique(group[order], return_inverse=True)
    return order, dense.astype(np.int64) * span + (times[order] - t0 + 1), t0, span


def _window_bounds(
    group: np.ndarray, times: np.ndarray, window_ms: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ordered by (group, time) and, per ordered row, [start, end) of the same group's rows
    in ``[t − window, t)`` (strictly earlier than t)."""
    order, keys, t0, span = _sorted_keys(group, times)
    base = keys - (times[order] - t0 + 1)  # group * span
    lo_rel = np.clip(times[order] - window_ms - t0 + 1, 0, span - 1)
    start = np.searchsorted(keys, base + lo_rel, side="left")
    end = np.searchsorted(keys, keys, side="left")
    return order, start, end


def user_window_mean(
    users: np.ndarray, times: np.ndarray, vectors: np.ndarray, window_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: mean of the same user's vectors in ``[t − window, t)`` and their count.

    Returns float32 [N, d] (zeros when the count is 0) and int64 [N].
    """
    n, d = vectors.shape
    if n == 0:
        return np.zeros((0, d), np.float32), np.zeros(0, np.int64)
    order, start, end = _window_bounds(users, times, window_ms)
    csum = np.zeros((n + 1, d), dtype=np.float64)
    csum[1:] = np.cumsum(vectors[order].astype(np.float64), axis=0)
    count = end - start
    mean = (csum[end] - csum[start]) / np.maximum(count, 1)[:, None]
    out = np.zeros((n, d), np.float32)
    cnt = np.zeros(n, np.int64)
    out[order] = mean.astype(np.float32)
    cnt[order] = count
    return out, cnt


def user_similar_items_mean(
    users: np.ndarray,
    times: np.ndarray,
    item_vectors: np.ndarray,
    vectors: np.ndarray,
    window_ms: int,
    last_n: int,
    top_m: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Item-aware fallback (issue 22, design "similar items of the same user"): per row, of the
    same user's latest ``last_n`` rows in ``[t − window, t)``, the ``top_m`` whose *items* are
    most similar to this row's item (cosine of ``item_vectors``, e.g. the FM's item table),
    their ``vectors`` averaged with weights max(cos, 0).

    ``item_vectors`` float32 [N, di] is each row's item vector (zeros for an unknown item).
    Returns float32 [N, d] and the number of rows with a positive weight (0 = unavailable).
    """
    n, d = vectors.shape
    if n == 0:
        return np.zeros((0, d), np.float32), np.zeros(0, np.int64)
    order, start, end = _window_bounds(users, times, window_ms)
    unit = item_vectors[order].astype(np.float32)
    unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
    vec_sorted = vectors[order].astype(np.float32)
    m = min(top_m, last_n)
    out_sorted = np.zeros((n, d), np.float32)
    cnt_sorted = np.zeros(n, np.int64)
    for s in range(0, n, 2048):
        e = min(n, s + 2048)
        idx = end[s:e, None] - last_n + np.arange(last_n)[None, :]
        ok = idx >= start[s:e, None]
        idx_c = np.where(ok, idx, 0)
        cos = np.einsum("nd,nwd->nw", unit[s:e], unit[idx_c])
        cos = np.where(ok, cos, -np.inf)
        best = np.argpartition(-cos, m - 1, axis=1)[:, :m]
        w = np.maximum(np.take_along_axis(cos, best, axis=1), 0.0)  # -inf → 0
        rows = np.take_along_axis(idx_c, best, axis=1)
        total = w.sum(axis=1)
        summed = np.einsum("nm,nmd->nd", w, vec_sorted[rows])
        out_sorted[s:e] = summed / np.maximum(total, 1e-12)[:, None]
        cnt_sorted[s:e] = (w > 0).sum(axis=1)
    out = np.zeros((n, d), np.float32)
    cnt = np.zeros(n, np.int64)
    out[order] = out_sorted
    cnt[order] = cnt_sorted
    return out, cnt


def item_neighbour_mean(
    users: np.ndarray,
    items: np.ndarray,
    times: np.ndarray,
    vectors: np.ndarray,
    window_ms: int,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: mean of the ``k`` latest vectors of the same item by *other* users in
    ``[t − window, t)``; float32 [N, d] and count int64 [N]."""
    n, d = vectors.shape
    if n == 0:
        return np.zeros((0, d), np.float32), np.zeros(0, np.int64)
    order, keys, t0, span = _sorted_keys(items, times)
    base = keys - (times[order] - t0 + 1)
    lo_rel = np.clip(times[order] - window_ms - t0 + 1, 0, span - 1)
    start = np.searchsorted(keys, base + lo_rel, side="left")
    end = np.searchsorted(keys, keys, side="left")
    width = 2 * k  # look back a little further to skip the user's own rows
    idx = end[:, None] - width + np.arange(width)[None, :]
    ok = idx >= start[:, None]
    idx_c = np.where(ok, idx, 0)
    u_sorted = users[order]
    ok &= u_sorted[idx_c] != u_sorted[:, None]
    # keep only the latest k valid entries: rank valid ones from the right
    rank_from_right = np.cumsum(ok[:, ::-1], axis=1)[:, ::-1]
    ok &= rank_from_right <= k
    vec_sorted = vectors[order].astype(np.float32)
    weights = ok.astype(np.float32)
    summed = np.zeros((n, d), np.float32)
    for s in range(0, n, 2048):  # chunked: the gathered block is [chunk, 2k, d]
        summed[s : s + 2048] = np.einsum(
            "nw,nwd->nd", weights[s : s + 2048], vec_sorted[idx_c[s : s + 2048]]
        )
    count = ok.sum(axis=1)
    mean = summed / np.maximum(count, 1)[:, None]
    out = np.zeros((n, d), np.float32)
    cnt = np.zeros(n, np.int64)
    out[order] = mean
    cnt[order] = count
    return out, cnt
