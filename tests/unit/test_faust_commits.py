"""The commit-offset correction: never commit past the unacked message at the committed
position (Faust 0.15 skipped exactly one such message)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
from intervaltree import IntervalTree

from streams.live.faust_commits import HOLE_COMMITS, ack, new_offset, original, original_ack


class TopicPartition(NamedTuple):
    topic: str
    partition: int


TP = TopicPartition(topic="requests", partition=3)


def consumer(acked: list[int], committed: int | None, gaps: list[tuple[int, int]] = ()) -> Any:
    gap_tree: defaultdict[Any, IntervalTree] = defaultdict(IntervalTree)
    for begin, end in gaps:
        gap_tree[TP].addi(begin, end)
    seeks: list[tuple[Any, int]] = []

    async def seek(tp: Any, offset: int) -> None:
        seeks.append((tp, offset))

    return SimpleNamespace(
        seek=seek,
        seeks=seeks,
        _acked={TP: list(acked)},
        _acked_index={TP: set(acked)},
        _committed_offset=defaultdict(lambda: None, {TP: committed}),
        _gap=gap_tree,
    )


@pytest.mark.parametrize("committed", [30, 0])
def test_the_unacked_message_at_the_committed_position_holds_the_commit(committed: int) -> None:
    c = consumer([committed + 1, committed + 2], committed)
    assert asyncio.run(attempts(c, 1)) == [None]
    assert c._acked[TP] == [committed + 1, committed + 2]  # kept for the next commit
    assert original()(consumer([committed + 1, committed + 2], committed), TP) == committed + 3


async def attempts(c: Any, n: int) -> list[int | None]:
    out = [new_offset(c, TP) for _ in range(n)]
    await asyncio.sleep(0)  # let a scheduled seek run
    return out


def test_a_persistent_hole_rereads_the_partition_from_the_committed_position() -> None:
    c = consumer([31, 32], 30)
    assert asyncio.run(attempts(c, HOLE_COMMITS - 1)) == [None] * (HOLE_COMMITS - 1)
    assert c.seeks == []
    assert asyncio.run(attempts(c, 1)) == [None]
    assert c.seeks == [(TP, 30)]
    c._acked[TP].append(30)  # the re-read message is processed: the commit moves on
    assert new_offset(c, TP) == 33


def test_consecutive_acks_from_the_committed_position_commit_their_end() -> None:
    c = consumer([32, 30, 31, 35], 30)
    assert new_offset(c, TP) == 33
    assert c._acked[TP] == [35] and c._acked_index[TP] == {35}


def test_first_commit_after_an_assignment_and_recorded_gaps_still_work() -> None:
    assert new_offset(consumer([7, 8], None), TP) == 9
    # offsets 31-33 are missing from the log (recorded by Faust): they count as acked
    assert new_offset(consumer([30, 34], 30, gaps=[(31, 34)]), TP) == 35
    assert new_offset(consumer([], 30), TP) is None


def acking_consumer(committed: int, generation: int) -> Any:
    """The attributes Faust's ``Consumer.ack`` uses, around the offsets of :func:`consumer`."""
    c = consumer([], committed)
    c.app = SimpleNamespace(
        consumer_generation_id=generation,
        topics=SimpleNamespace(acks_enabled_for=lambda topic: True),
    )
    c._unacked_messages, c._n_acked, c._waiting_for_ack = set(), 0, None
    return c


class Message:
    """The fields of a Faust message that acking reads (hashable, like Faust's)."""

    def __init__(self, offset: int, generation: int) -> None:
        self.acked, self.tp, self.topic = False, TP, TP.topic
        self.offset, self.generation_id = offset, generation


@pytest.mark.parametrize("patched", [True, False])
def test_a_message_skipped_after_a_rebalance_is_not_committed(patched: bool) -> None:
    """Offset 30 was fetched in generation 1 and skipped by the stream in generation 2 (Faust
    acks it); 31 was fetched again in generation 2 and processed. Nothing may be committed
    past 30, which must be read again."""
    c = acking_consumer(committed=30, generation=2)
    old, new = Message(30, generation=1), Message(31, generation=2)
    c._unacked_messages.update({old, new})
    do_ack = ack if patched else original_ack()
    assert do_ack(c, old) is not patched
    assert do_ack(c, new) is True
    assert old.acked and old not in c._unacked_messages  # released: shutdown does not wait
    got = new_offset(c, TP) if patched else original()(c, TP)
    assert (got is None) if patched else (got == 32)  # Faust's own ack commits past 30


def seeking_consumer(committed: dict[Any, int | None], earliest: dict[Any, int]) -> Any:
    """A consumer as :func:`perform_seek` sees it after Faust's own seek to the commits."""
    c = consumer([], None)
    c._committed_offset = defaultdict(lambda: None, committed)
    c.app = SimpleNamespace(topics=SimpleNamespace(acks_enabled_for=lambda t: t != "changelog"))
    c.assignment = lambda: set(committed)
    asked: list[tuple[Any, ...]] = []

    async def earliest_offsets(*tps: Any) -> dict[Any, int]:
        asked.append(tps)
        return {tp: earliest[tp] for tp in tps}

    c.earliest_offsets, c.asked = earliest_offsets, asked
    return c


def test_a_partition_without_a_commit_is_read_from_the_logs_first_offset(monkeypatch) -> None:
    """Faust leaves the fetch position of a never-committed partition where it was (offset 0,
    fetched before a rebalance, was never read again); it is sought to the log's first offset,
    and the hole check holds the commit at that offset."""
    import streams.live.faust_commits as fc

    async def faust_seek(c: Any) -> None:  # Faust's own: committed partitions only
        for tp, offset in c._committed_offset.items():
            if offset:
                await c.seek(tp, offset)

    monkeypatch.setattr(fc, "_ORIGINAL_SEEK", faust_seek)
    other, log = TopicPartition("requests", 1), TopicPartition("changelog", 0)
    c = seeking_consumer({TP: None, other: 40, log: None}, {TP: 0, log: 0})
    assert fc.start_offset(c, TP) is None  # before the seek: not known
    asyncio.run(fc.perform_seek(c))
    assert set(c.seeks) == {(TP, 0), (other, 40)}  # the changelog is the tables' business
    assert c.asked == [(TP,)]
    assert fc.start_offset(c, TP) == 0 and fc.start_offset(c, other) == 40
    c._acked[TP], c._acked_index[TP] = [1, 2, 3], {1, 2, 3}  # offset 0 not processed yet
    assert new_offset(c, TP) is None
    c._acked[TP].append(0)
    assert new_offset(c, TP) == 4


def test_the_logs_first_offset_after_retention_is_where_reading_starts(monkeypatch) -> None:
    import streams.live.faust_commits as fc

    async def faust_seek(c: Any) -> None:
        return None

    monkeypatch.setattr(fc, "_ORIGINAL_SEEK", faust_seek)
    c = seeking_consumer({TP: None}, {TP: 500})  # offsets below 500 were deleted
    asyncio.run(fc.perform_seek(c))
    assert c.seeks == [(TP, 500)]
    c._acked[TP], c._acked_index[TP] = [500, 501], {500, 501}
    assert new_offset(c, TP) == 502
