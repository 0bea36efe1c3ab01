"""Each partition reaches an agent in offset order (streams.live.ordering), with the consumer
parts Faust's ``Consumer.ack`` and ``seek`` use."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace
from typing import Any, NamedTuple

from intervaltree import IntervalTree

from streams.live.faust_commits import ack
from streams.live.ordering import PartitionOrder


class TP(NamedTuple):
    topic: str
    partition: int


P0, P1 = TP("requests", 0), TP("requests", 1)


class Message:
    def __init__(self, tp: TP, offset: int, generation: int = 1) -> None:
        self.tp, self.topic, self.offset, self.generation_id = tp, tp.topic, offset, generation
        self.acked = False


def app(committed: dict[TP, int], log_start: dict[TP, int] | None = None) -> Any:
    seeks: list[tuple[TP, int]] = []

    async def seek(tp: TP, offset: int) -> None:
        seeks.append((tp, offset))

    async def earliest_offsets(*tps: TP) -> dict[TP, int]:
        return {tp: (log_start or {}).get(tp, 0) for tp in tps}

    consumer = SimpleNamespace(
        seek=seek,
        earliest_offsets=earliest_offsets,
        _gap=defaultdict(IntervalTree),
        seeks=seeks,
        _committed_offset=defaultdict(lambda: None, committed),
        _acked=defaultdict(list),
        _acked_index=defaultdict(set),
        _unacked_messages=set(),
        _n_acked=0,
        _waiting_for_ack=None,
    )
    a = SimpleNamespace(
        consumer=consumer,
        consumer_generation_id=1,
        topics=SimpleNamespace(acks_enabled_for=lambda topic: True),
    )
    consumer.app = a
    return a


def admitted(order: PartitionOrder, offsets: list[tuple[TP, int]]) -> list[tuple[TP, int]]:
    async def run() -> list[tuple[TP, int]]:
        out = [(tp, o) for tp, o in offsets if order.admit(Message(tp, o))]
        for _ in range(4):  # let scheduled seeks (a lookup, a gap, then the seek) run
            await asyncio.sleep(0)
        return out

    return asyncio.run(run())


def test_offsets_from_the_committed_position_are_processed_in_order() -> None:
    order = PartitionOrder(app({P0: 10, P1: 3}))
    seq = [(P0, 10), (P1, 3), (P0, 11), (P1, 4), (P0, 12)]
    assert admitted(order, seq) == seq
    assert order.gaps == 0 and order.app.consumer.seeks == []


def test_a_later_offset_waits_for_the_missing_one_which_is_read_again() -> None:
    """Offsets 10-11 were skipped after a rebalance (fetched in the old generation); 12-13,
    fetched after it, must not be processed before them."""
    a = app({P0: 10})
    order = PartitionOrder(a)
    assert admitted(order, [(P0, 12), (P0, 13)]) == []
    assert a.consumer.seeks == [(P0, 10)]  # once, not per message
    assert order.gaps == 2
    # the re-read brings 10.. again, in order; 12 and 13 are processed after 10 and 11
    assert admitted(order, [(P0, 10), (P0, 11), (P0, 12), (P0, 13)]) == [
        (P0, 10),
        (P0, 11),
        (P0, 12),
        (P0, 13),
    ]
    assert admitted(order, [(P0, 12)]) == []  # a later re-read of a processed offset: skipped


def test_a_skipped_message_is_released_not_acked_so_the_commit_stays() -> None:
    a = app({P0: 10})
    order = PartitionOrder(a)
    ahead = Message(P0, 12)
    a.consumer._unacked_messages.add(ahead)

    async def admit() -> bool:
        return order.admit(ahead)

    assert not asyncio.run(admit())
    assert ack(a.consumer, ahead) is False  # the stream acks what it skips: not recorded
    assert ahead.acked and ahead not in a.consumer._unacked_messages
    assert a.consumer._acked[P0] == []
    again = Message(P0, 12)  # the same offset read again later is acked normally
    assert ack(a.consumer, again) is True and a.consumer._acked[P0] == [12]


def test_a_new_generation_restarts_from_the_commits() -> None:
    a = app({P0: 10})
    order = PartitionOrder(a)
    assert admitted(order, [(P0, 10), (P0, 11)]) == [(P0, 10), (P0, 11)]
    a.consumer_generation_id = 2
    a.consumer._committed_offset[P0] = 11  # 10 committed, 11 not: Faust re-reads from 11
    assert admitted(order, [(P0, 11), (P0, 12)]) == [(P0, 11), (P0, 12)]


def test_a_partition_without_a_commit_starts_at_the_logs_first_offset() -> None:
    """Offset 0 of a never-committed partition was skipped in a rebalance; the first message
    of the new generation is offset 1: a gap, the partition is read again from 0."""
    a = app({})
    a.consumer._solaris_starts = {P0: 0}  # what faust_commits.perform_seek found
    order = PartitionOrder(a)
    assert admitted(order, [(P0, 1), (P0, 2)]) == []
    assert a.consumer.seeks == [(P0, 0)]
    assert admitted(order, [(P0, 0), (P0, 1), (P0, 2)]) == [(P0, 0), (P0, 1), (P0, 2)]


def test_without_a_known_start_the_first_offset_seen_starts_the_partition() -> None:
    order = PartitionOrder(app({}))
    assert admitted(order, [(P1, 7), (P1, 8)]) == [(P1, 7), (P1, 8)]


def test_offsets_removed_from_the_log_do_not_stall_the_partition() -> None:
    """Issue 24: retention (or delete_records) removed offsets 10-14 while the group lagged at
    10; the log now starts at 15. Before, the partition sought 10 forever and stalled."""
    a = app({P0: 10}, log_start={P0: 15})
    order = PartitionOrder(a)
    assert admitted(order, [(P0, 15), (P0, 16)]) == []  # a gap: 10 is looked for first
    assert a.consumer.seeks == [(P0, 15)]  # ... and found gone: the re-read starts at 15
    # recorded as a gap: the commit may pass the removed offsets (from 10 itself)
    assert [(i.begin, i.end) for i in a.consumer._gap[P0]] == [(10, 15)]
    assert order.truncated == 5
    assert admitted(order, [(P0, 15), (P0, 16), (P0, 17)]) == [(P0, 15), (P0, 16), (P0, 17)]
