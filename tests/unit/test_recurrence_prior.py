"""RecurrencePrior read from the model thread while the event loop writes it."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine import recurrence
from streams.engine.recurrence import RecurrencePrior

T0 = 1_700_000_000_000


def test_pair_counts_count_the_users_recent_lists_up_to_the_request() -> None:
    prior = RecurrencePrior(lists_per_user=4, memory_ms=1_000)
    prior.observe([1, 2, 3], T0, user_id=7)
    prior.observe([2, 3], T0 + 500, user_id=7)
    prior.observe([3], T0 + 900, user_id=8)  # another user
    prior.observe([1], T0 + 2_000, user_id=7)  # later than the request: not counted
    assert prior.pair_counts(7, [1, 2, 3, 4], T0 + 600).tolist() == [1.0, 2.0, 2.0, 0.0]
    assert prior.pair_counts(7, [1, 2], T0 + 1_400).tolist() == [0.0, 1.0]  # T0 aged out


def test_a_list_appended_while_pair_counts_iterates_does_not_fail_the_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The live verify step reads in the model thread while the speculate step appends on the
    event loop; `make demo` dead-lettered a request with "deque mutated during iteration".
    Here the append happens, deterministically, between two iterations of the read."""
    prior = RecurrencePrior(lists_per_user=4, memory_ms=10_000)
    prior.observe([1, 2], T0, user_id=7)
    prior.observe([2, 3], T0 + 1, user_id=7)
    real_isin = np.isin
    appended = []

    def isin_then_append(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not appended:  # the event loop's next request of this user, mid-read
            appended.append(True)
            prior.observe([3, 4], T0 + 5, user_id=7)
        return real_isin(a, b)

    monkeypatch.setattr(recurrence.np, "isin", isin_then_append)
    counts = prior.pair_counts(7, [1, 2, 3, 4], T0 + 2)
    assert appended and counts.tolist() == [1.0, 2.0, 1.0, 0.0]
