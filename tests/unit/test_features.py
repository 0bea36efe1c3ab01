"""Features: vocabularies, histories strictly before the event time (no leakage), split, tiers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from models.features import (
    GAP_EDGES_MS,
    OOV,
    PAD,
    HistoryIndex,
    Vocab,
    context_features,
    fm_inputs,
    gap_buckets,
)
from models.offline_tiers import item_neighbour_mean, user_window_mean
from models.runtime import UserHistory, cut_histories
from models.split import SplitError, time_split


def _random_log(n: int = 400, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    users = rng.integers(1, 15, n).astype(np.int64)
    items = rng.integers(1, 50, n).astype(np.int64)
    labels = rng.integers(0, 2, n).astype(np.int8)
    times = np.sort(rng.integers(0, 10_000, n)).astype(np.int64) * 1000  # many ties
    return users, items, labels, times


def test_vocab_maps_known_ids_and_sends_unseen_to_oov() -> None:
    vocab = Vocab.build(np.array([30, 10, 20, 10]))
    assert vocab.size == 5
    assert vocab.lookup(np.array([10, 20, 30, 99, -1])).tolist() == [2, 3, 4, OOV, OOV]
    assert Vocab.build(np.array([], np.int64)).lookup(np.array([5])).tolist() == [OOV]


def test_history_is_last_l_strictly_before_cutoff_oldest_first() -> None:
    users = np.array([7, 7, 7, 7, 8], np.int64)
    items = np.array([1, 2, 3, 4, 5], np.int64)
    labels = np.array([1, 0, 1, 1, 1], np.int8)
    times = np.array([100, 200, 300, 300, 50], np.int64)
    index = HistoryIndex(users, items, labels, times)
    hist = index.gather(np.array([7, 7, 9]), np.array([300, 301, 1000]), 2)
    # at t=300 the two events *at* 300 are excluded; length 2 keeps the latest two before it
    assert hist.items[0].tolist() == [1, 2]
    assert hist.mask[0].tolist() == [True, True]
    assert hist.items[1].tolist() == [3, 4]
    assert hist.times_ms[1].tolist() == [300, 300]
    assert not hist.mask[2].any()  # unknown user: empty history
    assert index.count_before(np.array([7, 8]), np.array([301, 50])).tolist() == [4, 0]


def test_history_ignores_everything_at_or_after_the_cutoff() -> None:
    """Perturbing the future (items, labels, extra events) leaves every history unchanged."""
    users, items, labels, times = _random_log()
    rng = np.random.default_rng(1)
    q_users = rng.integers(1, 15, 200).astype(np.int64)
    q_cut = rng.integers(0, 10_000, 200).astype(np.int64) * 1000
    base = HistoryIndex(users, items, labels, times).gather(q_users, q_cut, 8)
    for i in range(200):
        future = times >= q_cut[i]
        extra_n = 30
        index = HistoryIndex(
            np.concatenate([users, np.full(extra_n, q_users[i])]),
            np.concatenate([np.where(future, 999, items), np.arange(extra_n) + 500]),
            np.concatenate([np.where(future, 1 - labels, labels), np.ones(extra_n, np.int8)]),
            np.concatenate([times, q_cut[i] + np.arange(extra_n)]),
        )
        hist = index.gather(q_users[i : i + 1], q_cut[i : i + 1], 8)
        np.testing.assert_array_equal(hist.items[0], base.items[i])
        np.testing.assert_array_equal(hist.labels[0], base.labels[i])
        assert (hist.times_ms[0][hist.mask[0]] < q_cut[i]).all()


def test_lagged_history_excludes_the_last_delta() -> None:
    users, items, labels, times = _random_log()
    index = HistoryIndex(users, items, labels, times)
    t = np.full(14, 8_000_000, np.int64)
    u = np.arange(1, 15, dtype=np.int64)
    lagged = index.gather(u, t - 600_000, 20)
    assert (lagged.times_ms[lagged.mask] < 8_000_000 - 600_000).all()
    assert (index.count_before(u, t - 600_000) <= index.count_before(u, t)).all()


def test_serving_cut_matches_offline_gather() -> None:
    """runtime.cut_histories (online) == HistoryIndex.gather (offline) on the same events."""
    users, items, labels, times = _random_log(seed=3)
    index = HistoryIndex(users, items, labels, times)
    q_users = np.arange(1, 15, dtype=np.int64)
    q_times = np.full(14, 6_000_000, np.int64)
    offline = index.gather(q_users, q_times, 6)
    histories = []
    for u in q_users:
        m = users == u
        histories.append(UserHistory(items[m], labels[m], times[m]))
    online = cut_histories(histories, q_times, 6)
    for name in ("items", "labels", "times_ms", "mask"):
        np.testing.assert_array_equal(getattr(online, name), getattr(offline, name))


def test_gap_buckets_and_fm_inputs() -> None:
    ref = np.array([10 * 60_000], np.int64)
    times = np.array([[0, 10 * 60_000 - 1, 10 * 60_000 - 60_000, 0]], np.int64)
    mask = np.array([[False, True, True, True]])
    b = gap_buckets(ref, times, mask)
    assert b[0, 0] == PAD
    assert b[0, 1] == 1  # < 1 min
    assert b[0, 2] == 2  # exactly 1 min → second bucket
    assert b[0, 3] == 1 + int(np.searchsorted(GAP_EDGES_MS, 10 * 60_000, side="right"))
    index = HistoryIndex(np.array([1]), np.array([42]), np.array([1], np.int8), np.array([5]))
    hist = index.gather(np.array([1]), np.array([10]), 3)
    x = fm_inputs(Vocab.build(np.array([42])), np.array([7]), np.array([10]), hist)
    assert x["target_item"].tolist() == [OOV]
    assert x["hist_item"].tolist() == [[PAD, PAD, 2]]
    assert x["hist_label"].tolist() == [[PAD, PAD, 2]]  # label 1 → token 2
    assert all(v.dtype == np.int64 for v in x.values())


def test_context_features_hour_and_weekday() -> None:
    # 2024-01-01 (a Monday) 13:30 UTC
    ctx = context_features(np.array([1_704_115_800_000]))
    assert ctx.tolist() == [[13, 0]]


def test_time_split_is_ordered_disjoint_and_respects_ties() -> None:
    times = np.repeat(np.arange(100, dtype=np.int64), 3)
    split = time_split(times)
    parts = [split.fm_train, split.fm_valid, split.vm_train, split.vm_valid, split.test]
    assert sum(p.size for p in parts) == times.size
    for a, b in itertools.pairwise(parts):
        assert times[a].max() < times[b].min()  # no timestamp straddles two slices
    assert abs(split.test.size / times.size - 0.2) < 0.05
    with pytest.raises(SplitError):
        time_split(times[:5])


def test_offline_tiers_only_read_the_past() -> None:
    users = np.array([1, 1, 1, 2, 2], np.int64)
    items = np.array([9, 9, 8, 9, 9], np.int64)
    times = np.array([0, 10, 10, 5, 20], np.int64)
    vecs = np.arange(10, dtype=np.float32).reshape(5, 2)
    mean, count = user_window_mean(users, times, vecs, window_ms=100)
    assert count.tolist() == [0, 1, 1, 0, 1]
    np.testing.assert_allclose(mean[1], vecs[0])
    _, count_short = user_window_mean(users, times, vecs, window_ms=5)
    assert count_short[1] == 0  # row 0 is 10 ms old, outside a 5 ms window
    nb, nb_count = item_neighbour_mean(users, items, times, vecs, window_ms=100, k=5)
    # row 1 sees row 3 (user 2); row 4 (user 2, t=20) sees rows 0 and 1 but not its own row 3
    assert nb_count.tolist() == [0, 1, 0, 1, 2]
    np.testing.assert_allclose(nb[4], vecs[[0, 1]].mean(axis=0))
