"""Corrections to faust-streaming 0.15's offset commits: never commit past an unprocessed message.

**Skipped messages of an old consumer generation.** After a rebalance, a stream skips the
messages it fetched before it (their generation id is the old one) and *acks* them, expecting
them to be fetched again from the committed position. A commit that runs before the
re-positioning (the commit timer does not pause during recovery) then commits past them and
they are never delivered again. Measured in the fault matrix: a request of a partition the
worker kept through the rebalance produced no proposals, 1 run in 3 under load (CI failed on
it). :func:`ack` releases such a message (not pending any more, so shutdown does not wait for
it) without recording it as done; it is read again from the committed position.

**The unacked message at the committed position.**

Faust commits, per partition, the end of the first run of consecutive acked offsets. Its check
that this run starts at the committed position is off by one (``min(acked) - committed > 1``,
where ``committed`` is the *next* offset to read, Kafka's convention): when exactly the message
at the committed position has not been acked — e.g. it sat in an agent's buffer that a
rebalance cleared — the run after it is committed and that message is never delivered again.
Measured in the fault matrix (a second pipeline worker joining and leaving mid-replay): single
requests reached neither worker although their neighbours did, and their offsets were committed.
The check is also skipped when the committed position is 0.

**A partition with no commit.** Faust maps a committed offset of 0 to "none", and for a
partition with none it neither seeks nor checks holes: after a rebalance the fetch position
stays wherever it was, so a first message fetched before the rebalance (and skipped with its
old generation) is never read again. Measured in the fault matrix (a second pipeline worker
joining and leaving mid-replay, ~1 run in 6): offset 0 of a never-committed partition reached
no agent, offsets 1.. did and were committed. :func:`perform_seek` seeks such partitions to the
log's first offset, as Faust seeks committed ones to their commit, and :func:`start_offset`
gives that offset to the hole check and to :mod:`streams.live.ordering`.

:func:`install` replaces ``Consumer._new_offset`` with :func:`new_offset`, which waits until
the message at the committed position is acked. Such a message may never come on its own
(after a rebalance Faust can drop re-fetched offsets below a stale read position), so a hole
that persists over :data:`HOLE_COMMITS` commit attempts makes the consumer seek the partition
back to the committed position: the messages after it are delivered again, which the
pipeline's steps treat as redeliveries (at-least-once, idempotent). An agent handles a
partition's messages in order, so later offsets are never acked before an earlier one that is
still in flight: a hole means a message that was dropped. Gaps Faust has recorded (offsets missing from
the log, e.g. compacted away) still count as acked, as before. SOLARIS's topics are neither
compacted nor transactional, so their offsets have no holes that could stall a partition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from faust.transport.consumer import Consumer
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

log = logging.getLogger(__name__)
_ORIGINAL = Consumer._new_offset
_ORIGINAL_ACK = Consumer.ack
_ORIGINAL_SEEK = Consumer.perform_seek
#: commit attempts (about one a second) that see the same hole before the partition is re-read
HOLE_COMMITS = 3
_SEEKS: set[asyncio.Future[Any]] = set()


def _fold_recorded_gaps(consumer: Any, tp: Any, acked: list[int]) -> None:
    """Offsets Faust recorded as missing from the log, up to the newest ack, count as acked."""
    gaps = consumer._gap[tp]
    if not gaps:
        return
    newest = max(acked)
    spans = sorted(gaps.overlap(0, newest), key=lambda span: span.begin)
    if not spans:
        return
    missing = [offset for span in spans for offset in range(span.begin, span.end)]
    acked.extend(missing)
    gaps.chop(0, max(missing[-1], newest + 1))


def start_offset(consumer: Any, tp: Any) -> int | None:
    """Where reading ``tp`` starts in this consumer generation: its committed offset, else the
    log's first offset that :func:`perform_seek` sought (None: not known)."""
    committed = consumer._committed_offset.get(tp)
    if committed is not None:
        return int(committed)
    starts: dict[Any, int] = consumer.__dict__.get("_solaris_starts", {})
    return starts.get(tp)


async def perform_seek(consumer: Any) -> None:
    """Faust's seek to the committed offsets, then partitions without one (or with 0, which
    Faust reads as none) to the log's first offset, remembered for :func:`start_offset`."""
    await _ORIGINAL_SEEK(consumer)
    acking = consumer.app.topics.acks_enabled_for
    fresh = [
        tp
        for tp in consumer.assignment()
        if consumer._committed_offset.get(tp) is None and acking(tp.topic)
    ]
    found = await consumer.earliest_offsets(*fresh) if fresh else {}
    starts = {tp: int(found[tp]) for tp in fresh if found.get(tp) is not None}
    for tp, offset in starts.items():
        await consumer.seek(tp, offset)
    if starts:
        log.info(
            "partitions without a committed offset: reading from the log's first offset",
            extra={"partitions": {f"{tp.topic}[{tp.partition}]": o for tp, o in starts.items()}},
        )
    consumer.__dict__["_solaris_starts"] = starts


def new_offset(consumer: Any, tp: Any) -> int | None:
    """The offset to commit for ``tp`` now (None: nothing new is safe to commit)."""
    acked: list[int] = consumer._acked[tp]
    if not acked:
        return None
    _fold_recorded_gaps(consumer, tp, acked)
    acked.sort()
    committed = start_offset(consumer, tp)
    if committed is not None and acked[0] > committed:
        _note_hole(consumer, tp, committed)  # the message at the committed position is missing
        return None
    run = 1
    while run < len(acked) and acked[run] == acked[run - 1] + 1:
        run += 1
    done = acked[:run]
    del acked[:run]
    consumer._acked_index[tp].difference_update(done)
    return done[-1] + 1


def _note_hole(consumer: Any, tp: Any, committed: int) -> None:
    """Count commit attempts blocked at ``committed``; re-read the partition from there when
    the hole persists."""
    holes: dict[Any, tuple[int, int]] = consumer.__dict__.setdefault("_solaris_holes", {})
    at, seen = holes.get(tp, (committed, 0))
    seen = seen + 1 if at == committed else 1
    if seen < HOLE_COMMITS:
        holes[tp] = (committed, seen)
        return
    holes.pop(tp, None)
    log.warning(
        "offset never delivered: re-reading the partition from the committed position",
        extra={"topic": tp.topic, "partition": tp.partition, "offset": committed},
    )
    seek_soon(consumer, tp, committed)


def seek_soon(
    consumer: Any,
    tp: Any,
    offset: int,
    on_truncated: Callable[[Any, int, int], None] | None = None,
) -> None:
    """Schedule a seek of ``tp`` to ``offset`` on the running loop (the partition is re-read).

    With ``on_truncated``, the log's first offset is looked up first: when retention or
    ``delete_records`` removed ``offset`` already, the seek goes to the first offset that is
    left and ``on_truncated(tp, offset, first)`` is called, instead of seeking forever to an
    offset that no longer exists (issue 24: the partition stalled for good)."""
    task = asyncio.ensure_future(_seek_existing(consumer, tp, offset, on_truncated))
    _SEEKS.add(task)  # keep a reference until it is done (the loop holds only a weak one)
    task.add_done_callback(_SEEKS.discard)


async def _seek_existing(
    consumer: Any,
    tp: Any,
    offset: int,
    on_truncated: Callable[[Any, int, int], None] | None,
) -> None:
    if on_truncated is not None:
        found = await consumer.earliest_offsets(tp)
        first = found.get(tp)
        if first is not None and offset < int(first):
            # commits cover only contiguous acked offsets from the committed one: the removed
            # range is recorded as a gap (as Faust does for compacted offsets; not through its
            # _add_gap, which leaves out the committed offset itself), else the group's commit,
            # and so its lag, would stay put for good
            gaps = consumer._gap[tp]
            gaps.addi(offset, int(first))
            gaps.merge_overlaps()
            on_truncated(tp, offset, int(first))
            offset = int(first)
    await consumer.seek(tp, offset)


def release(consumer: Any, message: Any) -> None:
    """Mark ``message`` as skipped-to-be-read-again: its coming ack (the stream acks what it
    skips) releases it without recording it as done (see :func:`ack`)."""
    released: set[tuple[Any, int]] = consumer.__dict__.setdefault("_solaris_released", set())
    released.add((message.tp, message.offset))


def ack(consumer: Any, message: Any) -> bool:
    """Faust's ack, except for a message fetched before the current consumer generation or
    :func:`release` d: it is released but not recorded as done (it will be read again)."""
    released: set[tuple[Any, int]] | None = consumer.__dict__.get("_solaris_released")
    key = (message.tp, message.offset)
    if released is not None and key in released:
        released.discard(key)
    elif message.generation_id == consumer.app.consumer_generation_id:
        return bool(_ORIGINAL_ACK(consumer, message))
    with ack_lock:
        message.acked = True
        consumer._unacked_messages.discard(message)
        notify(consumer._waiting_for_ack)
    return False


def install() -> None:
    """Patch Faust's consumer class (idempotent; every worker calls it before Faust starts)."""
    Consumer._new_offset = new_offset  # type: ignore[method-assign,assignment]
    Consumer.ack = ack  # type: ignore[method-assign,assignment]
    Consumer.perform_seek = perform_seek  # type: ignore[method-assign,assignment]


def original() -> Any:
    """Faust's own implementation (for tests that show the difference)."""
    return _ORIGINAL


def original_ack() -> Any:
    """Faust's own ``Consumer.ack`` (for tests that show the difference)."""
    return _ORIGINAL_ACK
