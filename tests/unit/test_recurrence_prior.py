"""RecurrencePrior: pair counts as of a request (only the speculate step reads and writes it)."""

from __future__ import annotations

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
