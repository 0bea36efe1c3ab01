"""The counts the speculate side derives across users (the item prior over the pair memories,
the look-ahead over the histories): followed change by change, they equal what a restarted
worker rebuilds from its tables."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.lookahead import Lookahead

T0 = 1_700_000_000_000
MEMORY_MS = ENGINE_DEFAULTS.verifier.pair_memory_ms


def remembered(prior: Any, memory: Any, request_id: str, items: list[int], t: int) -> Any:
    """``memory`` with one more list, the prior following it (what the speculate step does)."""
    after = memory.remember(request_id, items, t)
    prior.replace(memory, after)
    return after


def test_item_prior_counts_the_lists_the_pair_memories_hold_within_its_window() -> None:
    from streams.engine.recurrence import EMPTY_MEMORY, LISTS_PER_USER, REDELIVERY_SLACK, ItemPrior
    from streams.engine.recurrence import PRIOR_BUCKET_MS as B

    prior = ItemPrior(window_ms=6 * B)
    a = remembered(prior, EMPTY_MEMORY, "a1", [1, 2], T0)
    b = remembered(prior, EMPTY_MEMORY, "b1", [2, 3], T0 + 10)
    assert prior.raw_counts([1, 2, 3, 4]).tolist() == [1.0, 2.0, 1.0, 0.0]
    assert prior.scores([1, 2, 3, 4]).tolist() == [0.5, 1.0, 0.5, 0.0]
    assert prior.scores([]).shape == (0,)
    assert remembered(prior, a, "a1", [1, 2], T0) is a  # a redelivery: counted once
    assert prior.raw_counts([1, 2]).tolist() == [1.0, 2.0]
    # a list dropped from its user's memory is no longer counted
    for n in range(LISTS_PER_USER + REDELIVERY_SLACK):
        b = remembered(prior, b, f"b{n + 2}", [9], T0 + 20 + n)
    assert prior.raw_counts([1, 2, 3, 9]).tolist() == [1.0, 1.0, 0.0, 6.0]
    # whole buckets leave the window: T0's bucket once a list six buckets later comes
    remembered(prior, EMPTY_MEMORY, "c1", [5], T0 + 5 * B)
    assert prior.raw_counts([1, 9]).tolist() == [1.0, 6.0]
    remembered(prior, EMPTY_MEMORY, "d1", [5], T0 - T0 % B + 6 * B)
    assert prior.raw_counts([1, 5, 9]).tolist() == [0.0, 2.0, 0.0]
    remembered(prior, EMPTY_MEMORY, "e1", [7], T0)  # older than the window: not counted
    assert prior.raw_counts([7]).tolist() == [0.0]
    with pytest.raises(ValueError, match="positive"):
        ItemPrior(window_ms=0)


def test_item_prior_rebuilt_from_the_memories_equals_the_one_that_followed_them() -> None:
    """What a restarted worker rebuilds from its ``recent`` table (in the table's order, not
    the requests') is the prior an uninterrupted one holds, count for count."""
    from streams.engine.recurrence import EMPTY_MEMORY, PRIOR_BUCKET_MS, ItemPrior

    rng = np.random.default_rng(11)
    prior, memories = ItemPrior(window_ms=4 * 3_600_000), {}
    for n in range(400):
        user = int(rng.integers(0, 25))
        t = T0 + n * PRIOR_BUCKET_MS // 7
        items = [int(x) for x in rng.choice(60, 8, replace=False)]
        memories[user] = remembered(prior, memories.get(user, EMPTY_MEMORY), f"r{n}", items, t)
        if n % 50 == 49:
            rebuilt = ItemPrior(window_ms=4 * 3_600_000)
            order = list(memories.values())
            rng.shuffle(order)  # type: ignore[arg-type]
            rebuilt.rebuild(order)
            assert rebuilt == prior
            probe = list(range(60))
            assert rebuilt.raw_counts(probe).tolist() == prior.raw_counts(probe).tolist()
    assert prior.raw_counts(list(range(60))).sum() > 0


def test_lookahead_rebuilt_from_the_histories_equals_the_one_that_followed_them() -> None:
    """What a restarted worker rebuilds from its ``history`` table (in the table's order) is
    what an uninterrupted one holds: co-visits and trending counts, and so its proposals;
    redeliveries, late impressions and histories at capacity included."""
    from schemas.records import ImpressionEvent
    from streams.engine.steps.history import observe_impression

    rng = np.random.default_rng(17)
    la, histories = Lookahead(), {}
    for n in range(600):
        user = int(rng.integers(0, 12))
        late = int(rng.integers(0, 3)) == 0  # a late impression lands inside the history
        t = T0 + n * 20_000 - (int(rng.integers(0, 600_000)) if late else 0)
        imp = ImpressionEvent(
            f"r{n}", user, int(rng.integers(0, 30)), t, 0, int(rng.integers(0, 2))
        )
        entries = histories.setdefault(user, [])
        observe_impression(entries, imp, 8, la)
        if n % 7 == 0:
            observe_impression(entries, imp, 8, la)  # a redelivery
        if n % 100 == 99:
            rebuilt = Lookahead()
            order = list(histories.values())
            rng.shuffle(order)  # type: ignore[arg-type]
            rebuilt.rebuild(order)
            assert rebuilt == la
            for item in range(30):
                assert rebuilt.propose([item], 5, set()) == la.propose([item], 5, set())
    assert la.covisit._pairs and la.trending.top(3)
