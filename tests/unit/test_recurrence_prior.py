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


def test_pair_counts_equal_one_membership_test_per_list() -> None:
    """The sorted-merge count equals the plain definition (one ``np.isin`` per remembered
    list), on random lists with repeats inside a list, repeated queries and absent items."""
    import numpy as np

    rng = np.random.default_rng(3)
    prior = RecurrencePrior(lists_per_user=4, memory_ms=5_000)
    kept: dict[int, list[tuple[int, np.ndarray]]] = {}
    for n in range(300):
        user, t = int(rng.integers(5)), T0 + 100 * n
        listed = rng.integers(0, 40, size=int(rng.integers(1, 30)))
        prior.observe(listed.tolist(), t, user_id=user)
        kept.setdefault(user, []).append((t, listed))
        query = rng.integers(0, 45, size=int(rng.integers(1, 12)))
        want = np.zeros(query.shape[0])
        for seen_at, lst in kept[user][-4:]:
            if 0 <= t - seen_at <= 5_000:
                want += np.isin(query, lst)
        assert prior.pair_counts(user, query.tolist(), t).tolist() == want.tolist(), n


def test_add_many_equals_one_add_per_key_bit_for_bit() -> None:
    """Same scores (exact floats), rebase and undo as :meth:`DecayedCounter.add` per key, over
    repeated keys and gaps long enough to rebase."""
    import numpy as np

    from streams.engine.lookahead import DecayedCounter
    from streams.engine.undo import UndoLog

    rng = np.random.default_rng(5)
    one, many = DecayedCounter(1_000), DecayedCounter(1_000)
    t = T0
    for n in range(200):
        t += int(rng.integers(0, 200_000 if n % 50 == 49 else 500))  # some gaps rebase
        keys = rng.integers(0, 30, size=int(rng.integers(0, 12))).tolist()
        undo_one, undo_many = UndoLog(), UndoLog()
        one.undo, many.undo = undo_one, undo_many
        for k in keys:
            one.add(k, t)
        many.add_many(keys, t)
        assert many._score == one._score and many._t0 == one._t0, n
        if n % 7 == 0:  # a rerun's rollback restores the same state
            undo_one.rollback()
            undo_many.rollback()
            assert many._score == one._score and many._t0 == one._t0, n
