"""Recurrence inputs: the pair memory (per-user state, pure) and the item prior (process state).
Only the speculate step reads and writes them."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.recurrence import (
    EMPTY_MEMORY,
    LISTS_PER_USER,
    REDELIVERY_SLACK,
    PairMemory,
    recurrence_key,
)
from streams.engine.state import RECENT
from streams.engine.steps.expiry import recent_newest_ms, state_newest_ms

T0 = 1_700_000_000_000
MEMORY_MS = ENGINE_DEFAULTS.verifier.pair_memory_ms


def test_pair_counts_count_the_users_recent_lists_up_to_the_request() -> None:
    memory = EMPTY_MEMORY.remember("r1", [1, 2, 3], T0)
    memory = memory.remember("r2", [2, 3], T0 + 500)
    later = memory.remember("r3", [1], T0 + 2_000)  # later than the request: not counted
    assert later.pair_counts([1, 2, 3, 4], T0 + 600, MEMORY_MS).tolist() == [1.0, 2.0, 2.0, 0.0]
    aged = T0 + MEMORY_MS + 1  # T0's list aged out, T0 + 500's not yet
    assert memory.pair_counts([1, 2], aged, MEMORY_MS).tolist() == [0.0, 1.0]


def test_remember_keeps_the_newest_lists_and_ignores_a_redelivered_request() -> None:
    kept = LISTS_PER_USER + REDELIVERY_SLACK
    memory = EMPTY_MEMORY
    for n in range(kept + 2):
        memory = memory.remember(f"r{n}", [n % 3], T0 + n)
    assert [k.request_id for k in memory.lists] == [f"r{n}" for n in range(2, kept + 2)]
    again = memory.remember(f"r{kept + 1}", [99], T0 + 99)  # a redelivery
    assert again is memory
    assert memory.pair_counts([99], T0 + 99, MEMORY_MS).tolist() == [0.0]
    # only the newest LISTS_PER_USER lists up to the request count; later ones never do
    newest = [n % 3 for n in range(kept + 2)][-LISTS_PER_USER:]
    assert memory.pair_counts([0, 1, 2], T0 + kept + 1, MEMORY_MS).tolist() == [
        float(newest.count(i)) for i in range(3)
    ]
    # as of r{kept}, the oldest request of a redelivered tail of REDELIVERY_SLACK
    before = [n % 3 for n in range(kept + 1)][-LISTS_PER_USER:]
    assert memory.pair_counts([0, 1, 2], T0 + kept, MEMORY_MS).tolist() == [
        float(before.count(i)) for i in range(3)
    ]


def test_pair_counts_equal_one_membership_test_per_list() -> None:
    """The sorted-merge count equals the plain definition (one ``np.isin`` per remembered
    list), on random lists with repeats inside a list, repeated queries and absent items."""
    rng = np.random.default_rng(3)
    memories: dict[int, PairMemory] = {}
    kept: dict[int, list[tuple[int, np.ndarray]]] = {}
    step = MEMORY_MS // 50
    for n in range(300):
        user, t = int(rng.integers(5)), T0 + step * n
        listed = rng.integers(0, 40, size=int(rng.integers(1, 30)))
        memories[user] = memories.get(user, EMPTY_MEMORY).remember(f"q{n}", listed.tolist(), t)
        kept.setdefault(user, []).append((t, listed))
        query = rng.integers(0, 45, size=int(rng.integers(1, 12)))
        want = np.zeros(query.shape[0])
        for seen_at, lst in kept[user][-LISTS_PER_USER:]:
            if 0 <= t - seen_at <= MEMORY_MS:
                want += np.isin(query, lst)
        assert memories[user].pair_counts(query.tolist(), t, MEMORY_MS).tolist() == want.tolist(), n


def test_the_codec_round_trips_and_tells_the_newest_list() -> None:
    """The ``recent`` table's value decodes to an equal memory (same counts at every time),
    and the table sweep's newest time equals the decoded state's."""
    memory = EMPTY_MEMORY.remember("a", [5, 3, 5], T0).remember("b", [3, 7], T0 + 10)
    value = RECENT.dump(memory)
    back = RECENT.load(value)
    assert [(k.request_id, k.seen_at_ms, k.items.tolist()) for k in back.lists] == [
        ("a", T0, [3, 5]),
        ("b", T0 + 10, [3, 7]),
    ]
    assert recent_newest_ms(value) == state_newest_ms(back) == T0 + 10
    assert RECENT.load(None) is EMPTY_MEMORY and recent_newest_ms(None) is None


@pytest.mark.parametrize("rank_by", ["recurrence", "pair"])
def test_the_pair_rankings_put_recurring_items_first(rank_by: str) -> None:
    """``pair`` is ``recurrence`` without the item prior (its prior counts are zeros): among
    equally recurrent items the VM breaks the tie, where ``recurrence`` lets the prior."""
    vm = np.array([0.9, 0.1, 0.5])
    prior = np.zeros(3) if rank_by == "pair" else np.array([4.0, 2.0, 1.0])
    key = recurrence_key(rank_by, vm, prior, np.array([0.0, 2.0, 2.0]))
    assert np.argsort(-key).tolist() == ([2, 1, 0] if rank_by == "pair" else [1, 2, 0])
    assert recurrence_key("pair", vm, np.zeros(3), np.zeros(3)).tolist() == pytest.approx(
        (1e-6 * vm).tolist()
    )
