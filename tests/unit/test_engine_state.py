"""History, ledger, micro-batcher and rolling aggregator: pure engine state."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import PairEmbedding
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.batcher import MicroBatcher
from streams.engine.history import HistoryBook, add_interaction, history_before
from streams.engine.ledger import is_fresh, record

T0 = 1_700_000_000_000
H = 3_600_000


def test_history_is_strictly_before_and_capped() -> None:
    book = HistoryBook(capacity=3)
    for k, t in enumerate([T0, T0 + 10, T0 + 10, T0 + 20, T0 + 30]):
        book.add(1, 100 + k, k % 2, t)
    h = book.before(1, T0 + 20, length=5)
    assert h.items.tolist() == [102]  # capacity 3 keeps 102..104; T0+20 and later excluded
    assert h.labels.dtype == np.int8 and h.times_ms.tolist() == [T0 + 10]
    assert book.before(1, T0, 5).items.size == 0 and book.before(2, T0 + 99, 5).items.size == 0


def test_history_orders_late_arrivals_and_ignores_duplicates() -> None:
    entries: list[tuple[int, int, int]] = []
    for item, t in [(1, 30), (2, 10), (3, 20), (2, 10)]:
        add_interaction(entries, item, 0, T0 + t, capacity=10)
    assert [e[0] for e in entries] == [2, 3, 1]
    assert history_before(entries, T0 + 25, 1).items.tolist() == [3]


def test_ledger_freshness_and_pruning() -> None:
    ledger: dict[int, int] = {}
    record(ledger, [1, 2], T0, ttl_ms=4 * H)
    assert is_fresh(ledger, 1, T0 + H, refresh_after_ms=2 * H)
    assert not is_fresh(ledger, 1, T0 + 2 * H, refresh_after_ms=2 * H)
    assert not is_fresh(ledger, 3, T0, refresh_after_ms=2 * H)
    record(ledger, [3], T0 + 5 * H, ttl_ms=4 * H)
    assert ledger == {3: T0 + 5 * H}


def test_batcher_flushes_on_size() -> None:
    b: MicroBatcher[int] = MicroBatcher(max_size=3, max_wait_ms=1000)
    assert b.add(1, 0) == [] and b.add(2, 1) == []
    assert b.add(3, 2) == [[1, 2, 3]]
    assert len(b) == 0


def test_batcher_flushes_on_wait() -> None:
    b: MicroBatcher[int] = MicroBatcher(max_size=100, max_wait_ms=50)
    b.add(1, 1000)
    b.add(2, 1040)
    assert b.poll(1049) is None
    assert b.poll(1050) == [1, 2]
    assert b.poll(5000) is None and b.flush() == []


def test_batcher_rejects_bad_size() -> None:
    with pytest.raises(ValueError, match="max_size"):
        MicroBatcher(max_size=0, max_wait_ms=1)


def emb(item: int, t: int, x: float) -> PairEmbedding:
    return PairEmbedding.from_array(1, item, t, "fm", np.full(4, x, np.float32))


def test_aggregate_is_mean_over_24h_of_event_time() -> None:
    agg = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    first = agg.add(state, [emb(1, T0, 1.0), emb(2, T0 + 10, 3.0)])
    assert first is not None and first.count == 2
    np.testing.assert_allclose(first.array(), 2.0)
    # 23 h later both are still inside the window
    mid = agg.add(state, [emb(3, T0 + 23 * H, 5.0)])
    assert mid is not None and mid.count == 3
    # 26 h after T0 the first bucket is evicted by event time
    late = agg.add(state, [emb(4, T0 + 26 * H, 7.0)])
    assert late is not None and late.count == 2 and late.event_time_ms == T0 + 26 * H
    np.testing.assert_allclose(late.array(), 6.0)


def test_aggregate_ignores_redelivered_embeddings_and_round_trips_json() -> None:
    agg = RollingAggregator(window_ms=24 * H, bucket_ms=H)
    state = AggregateState()
    agg.add(state, [emb(1, T0, 1.0)])
    assert agg.add(state, [emb(1, T0, 1.0)]) is None
    restored = AggregateState.from_json(state.to_json())
    again = agg.add(restored, [emb(2, T0 + 1, 3.0)])
    assert again is not None and again.count == 2
    np.testing.assert_allclose(again.array(), 2.0)


def test_aggregator_rejects_misaligned_window() -> None:
    with pytest.raises(ValueError, match="multiple"):
        RollingAggregator(window_ms=90, bucket_ms=60)


def test_ledger_table_value_round_trips_and_reads_the_old_format() -> None:
    from streams.engine.steps.verify import VERIFIED_REQUESTS_KEPT, LedgerState
    from streams.live.state import ledger_from_table, ledger_to_table

    ids = [f"r{n}" for n in range(VERIFIED_REQUESTS_KEPT + 3)]
    value = ledger_to_table(LedgerState({5: 100, 7: 200}, ids))
    back = ledger_from_table(value)
    assert back.pairs == {5: 100, 7: 200}
    assert back.requests == ids[-VERIFIED_REQUESTS_KEPT:]  # newest kept
    old = [[5, 100]]  # values written before request ids were remembered
    assert ledger_from_table(old) == LedgerState({5: 100}, [])
    assert ledger_from_table(None) == LedgerState()


def test_a_mark_past_the_in_flight_timeout_holds_only_if_its_vector_came_back() -> None:
    """Issue 24: a verified pair whose vector never came back (shed, dead-lettered, lost) may
    be proposed again once in flight longer than the timeout; one that came back may not,
    until ``refresh_after_ms``."""
    ledger = {1: T0, 2: T0}
    back = frozenset({(1, T0)})  # item 1's vector came back, item 2's did not

    def fresh(item: int, t: int) -> bool:
        return is_fresh(ledger, item, t, 2 * H, in_flight_ms=H // 2, confirmed=lambda: back)

    assert fresh(1, T0 + H // 4) and fresh(2, T0 + H // 4)  # both may still be on their way
    assert fresh(1, T0 + H) and not fresh(2, T0 + H)  # item 2 lost: propose it again
    assert not fresh(1, T0 + 2 * H)  # refresh_after as before
    # a vector that came back for an older mark does not confirm a newer one
    assert not is_fresh({1: T0 + 10}, 1, T0 + H, 2 * H, H // 2, lambda: back)


def test_confirmations_are_read_only_for_a_mark_past_the_in_flight_timeout() -> None:
    """Reading them costs a table read: young marks and the rule turned off never ask."""

    def never() -> frozenset[tuple[int, int]]:
        raise AssertionError("confirmations read without need")

    ledger = {1: T0}
    assert is_fresh(ledger, 1, T0 + H // 4, 2 * H, in_flight_ms=H // 2, confirmed=never)
    assert is_fresh(ledger, 1, T0 + H, 2 * H, in_flight_ms=2 * H, confirmed=never)  # off
    assert not is_fresh(ledger, 1, T0 + 3 * H, 2 * H, in_flight_ms=H // 2, confirmed=never)
    with pytest.raises(ValueError, match="confirmed embeddings"):
        is_fresh(ledger, 1, T0 + H, 2 * H, in_flight_ms=H // 2)
