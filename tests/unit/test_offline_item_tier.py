"""The item-aware fallback's offline construction (issue 22 item 3, design "similar items of
the same user"): by hand, strictly before t, same user only, inside the window."""

from __future__ import annotations

import numpy as np

from models.offline_tiers import user_similar_items_mean

A, B, C = [1.0, 0.0], [0.0, 1.0], [1.0, 0.1]


def _rows() -> tuple[np.ndarray, ...]:
    users = np.array([1, 1, 2, 1, 1], np.int64)
    times = np.array([100, 200, 250, 300, 300], np.int64)
    items = np.array([A, B, A, C, B], np.float32)
    vecs = np.array([[1, 1], [5, 5], [9, 9], [7, 7], [3, 3]], np.float32)
    return users, times, items, vecs


def test_the_most_similar_earlier_item_of_the_same_user_wins() -> None:
    users, times, items, vecs = _rows()
    got, n = user_similar_items_mean(users, times, items, vecs, 1_000, last_n=4, top_m=1)
    # row 3 (item C at t=300): of user 1's earlier rows (A, B) A is the closest: its vector
    np.testing.assert_allclose(got[3], [1, 1])
    # row 4 (item B at t=300): B's own earlier pair; the t=300 row C is not "before"
    np.testing.assert_allclose(got[4], [5, 5])
    assert n[0] == 0 and n[2] == 0  # nothing earlier for user 1 / for user 2
    np.testing.assert_array_equal(got[0], [0, 0])


def test_weights_are_the_cosines_and_the_window_cuts() -> None:
    users, times, items, vecs = _rows()
    got, n = user_similar_items_mean(users, times, items, vecs, 1_000, last_n=4, top_m=2)
    cos_a = 1.0 / np.linalg.norm(C)
    cos_b = 0.1 / np.linalg.norm(C)
    expected = (cos_a * np.array([1, 1]) + cos_b * np.array([5, 5])) / (cos_a + cos_b)
    np.testing.assert_allclose(got[3], expected, rtol=1e-5)
    assert n[3] == 2
    short, n_short = user_similar_items_mean(users, times, items, vecs, 150, last_n=4, top_m=2)
    np.testing.assert_allclose(short[3], [5, 5])  # only t=200 is within 150 ms of t=300
    assert n_short[3] == 1


def test_state_lags_point_at_the_previous_request_within_the_window() -> None:
    from models.experiment import state_lags
    from models.features import HistoryIndex

    users = np.array([1, 1, 1, 2], np.int64)
    times = np.array([100, 100, 400, 50], np.int64)  # user 1: two impressions of one request
    index = HistoryIndex(users, np.array([5, 6, 7, 8]), np.array([1, 0, 1, 0]), times)
    lag, has = state_lags(
        index, np.array([1, 1, 1, 2, 3]), np.array([100, 400, 1000, 60, 70]), window_ms=700
    )
    # at 100 nothing earlier; at 400 the request at 100 (300 ago); at 1000 the one at 400;
    # user 2 at 60: the one at 50; user 3: never seen
    np.testing.assert_array_equal(has, [False, True, True, True, False])
    np.testing.assert_array_equal(lag, [0, 300, 600, 10, 0])
    lag, has = state_lags(index, np.array([1]), np.array([1000]), window_ms=500)
    assert not has[0] and lag[0] == 0  # 600 ago is outside a 500 ms window
