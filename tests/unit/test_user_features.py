"""The fair VM's streaming user features (models.user_features): values by hand, no leakage,
and one code path for training (HistoryIndex) and serving (UserHistory lists)."""

from __future__ import annotations

import numpy as np

from models.features import HOUR_MS, MINUTE_MS, HistoryIndex, Vocab, cut_histories
from models.runtime import UserHistory
from models.user_features import (
    N_USER_STATS,
    RECENT_K,
    USER_STATS,
    recent_positive_items,
    user_stats,
    user_stream_inputs,
)

T0 = 1_700_000_000_000
COL = {name: i for i, name in enumerate(USER_STATS)}


def _history() -> UserHistory:
    # oldest first: item 5 engaged 2 days ago, item 6 not, item 7 engaged 30 min ago,
    # item 8 not engaged 2 min ago
    return UserHistory.of(
        [5, 6, 7, 8],
        [1, 0, 1, 0],
        [T0 - 48 * HOUR_MS, T0 - 30 * HOUR_MS, T0 - 30 * MINUTE_MS, T0 - 2 * MINUTE_MS],
    )


def test_stats_by_hand() -> None:
    raw = cut_histories([_history()], np.array([T0]), 8)
    got = user_stats(np.array([7]), np.array([T0]), raw)[0]
    assert got.shape == (N_USER_STATS,)
    assert got[COL["has_history"]] == 1.0
    np.testing.assert_allclose(got[COL["count"]], np.log1p(4) / np.log1p(8), rtol=1e-6)
    np.testing.assert_allclose(got[COL["positive_rate"]], 3 / 6, rtol=1e-6)
    scale = np.log1p(365 * 24 * 60)
    np.testing.assert_allclose(got[COL["since_last"]], np.log1p(2) / scale, rtol=1e-5)
    np.testing.assert_allclose(got[COL["since_positive"]], np.log1p(30) / scale, rtol=1e-5)
    np.testing.assert_allclose(got[COL["count_1h"]], 2 / 8, rtol=1e-6)
    np.testing.assert_allclose(got[COL["count_24h"]], 2 / 8, rtol=1e-6)
    np.testing.assert_allclose(got[COL["recent_positive_rate"]], 3 / 6, rtol=1e-6)
    assert got[COL["target_seen"]] == 1.0 and got[COL["target_engaged"]] == 1.0
    other = user_stats(np.array([6]), np.array([T0]), raw)[0]
    assert other[COL["target_seen"]] == 1.0 and other[COL["target_engaged"]] == 0.0


def test_a_user_without_history_gets_the_neutral_row() -> None:
    raw = cut_histories([UserHistory.empty()], np.array([T0]), 8)
    got = user_stats(np.array([3]), np.array([T0]), raw)[0]
    expected = dict.fromkeys(USER_STATS, 0.0)
    expected.update(positive_rate=0.5, since_last=1.0, since_positive=1.0, recent_positive_rate=0.5)
    np.testing.assert_allclose(got, [expected[n] for n in USER_STATS])
    assert (recent_positive_items(Vocab.build(np.array([5])), raw) == 0).all()


def test_recent_positive_items_are_the_newest_k_engaged_newest_last() -> None:
    vocab = Vocab.build(np.arange(1, 40))
    items = list(range(1, 31))
    labels = [1 if i % 2 else 0 for i in items]  # odd items engaged
    hist = UserHistory.of(items, labels, [T0 - 1000 * (31 - i) for i in items])
    raw = cut_histories([hist], np.array([T0]), 30)
    got = recent_positive_items(vocab, raw, k=4)[0]
    np.testing.assert_array_equal(got, vocab.lookup(np.array([23, 25, 27, 29])))
    assert recent_positive_items(vocab, raw).shape == (1, RECENT_K)


def test_no_leakage_the_event_itself_and_the_future_change_nothing() -> None:
    base = _history()
    later = UserHistory.of(
        [*base.items.tolist(), 9, 10],
        [*base.labels.tolist(), 1, 1],
        [*base.times_ms.tolist(), T0, T0 + MINUTE_MS],  # at and after the event time
    )
    vocab = Vocab.build(np.arange(1, 20))
    a = user_stream_inputs(
        vocab, np.array([9]), np.array([T0]), cut_histories([base], np.array([T0]), 8)
    )
    b = user_stream_inputs(
        vocab, np.array([9]), np.array([T0]), cut_histories([later], np.array([T0]), 8)
    )
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_training_and_serving_compute_equal_features() -> None:
    rng = np.random.default_rng(3)
    n = 400
    users = rng.integers(1, 12, n).astype(np.int64)
    items = rng.integers(1, 30, n).astype(np.int64)
    times = np.sort(rng.integers(T0, T0 + 50 * HOUR_MS, n)).astype(np.int64)
    labels = (rng.random(n) < 0.4).astype(np.int8)
    vocab = Vocab.build(items[: n // 2])
    index = HistoryIndex(users, items, labels, times)
    rows = np.arange(0, n, 7)
    offline = user_stream_inputs(
        vocab, items[rows], times[rows], index.gather(users[rows], times[rows], 8)
    )
    hists = [
        UserHistory(items[users == u], labels[users == u], times[users == u]) for u in users[rows]
    ]
    online = user_stream_inputs(
        vocab, items[rows], times[rows], cut_histories(hists, times[rows], 8)
    )
    for name in offline:
        np.testing.assert_array_equal(offline[name], online[name])
