"""Each partition is processed in offset order, also around rebalances.

The pipeline's steps are order-dependent per user (the ledger decides what a later request
verifies; a later embedding must be the one left in the store), and Kafka gives order per
partition. faust-streaming 0.15 can break it around a rebalance: messages fetched before it are
skipped by the stream (see :mod:`streams.live.faust_commits`) while later offsets of the same
partition, fetched after it, are processed; the skipped ones come back only when the partition
is re-read, after the later ones. Measured in the fault matrix (a second pipeline worker joining
and leaving mid-replay, 1 run in 3 at load 8): a user's requests 5-7 were speculated before 1-4,
which then verified other pairs than the simulator and left older pairs in the store.

:class:`PartitionOrder` is a stream processor placed before an agent's batching. Per partition
it knows the next offset to process (after each assignment, Faust's committed offset or, with
none, the log's first offset: :func:`streams.live.faust_commits.start_offset`; then one past
the last processed). A later offset is a gap: the message is skipped *without* being
recorded as done (:func:`streams.live.faust_commits.release`) and the partition is read again
from the expected offset, so messages reach the agent in order. An earlier offset was already
processed by this worker (a re-read): it is skipped and acked. When the expected offset is no
longer in the log (retention passed a lagging group's commit, or ``delete_records``), the
partition goes on from the log's first offset, counted in
``solaris_truncated_offsets_total`` and logged as an error, instead of stalling for good.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from faust.exceptions import Skip

from streams.live import faust_commits
from streams.live.metrics import TRUNCATED_OFFSETS

log = logging.getLogger(__name__)

#: seconds before a partition still waiting for its expected offset is sought again (a seek
#: can be undone by a fetch that was already under way)
RESEEK_AFTER_S = 1.0


@dataclass
class PartitionOrder:
    """The next offset per partition for one agent's stream (see the module docstring)."""

    app: Any
    next_offset: dict[Any, int] = field(default_factory=dict)
    #: partition -> (offset sought, when): a re-read under way
    seeking: dict[Any, tuple[int, float]] = field(default_factory=dict)
    generation: int | None = None
    gaps: int = 0  #: messages skipped because an earlier offset had not been processed yet
    truncated: int = 0  #: offsets gone from the log before they could be processed

    def admit(self, message: Any) -> bool:
        """True: process ``message`` now. False: skip it (already done, or ahead of a gap)."""
        generation = self.app.consumer_generation_id
        if generation != self.generation:  # a rebalance: positions restart from the commits
            self.generation = generation
            self.next_offset.clear()
            self.seeking.clear()
        tp, offset = message.tp, message.offset
        want = self.next_offset.get(tp)
        if want is None:
            start = faust_commits.start_offset(self.app.consumer, tp)
            want = offset if start is None else start
        if offset == want:
            self.next_offset[tp] = offset + 1
            self.seeking.pop(tp, None)
            return True
        if offset < want:
            self.next_offset[tp] = want
            return False
        self.next_offset[tp] = want
        self.gaps += 1
        faust_commits.release(self.app.consumer, message)
        self._seek(tp, want)
        return False

    def _seek(self, tp: Any, offset: int) -> None:
        sought = self.seeking.get(tp)
        now = time.monotonic()
        if sought is not None and sought[0] == offset and now - sought[1] < RESEEK_AFTER_S:
            return
        self.seeking[tp] = (offset, now)
        log.warning(
            "message ahead of an unprocessed offset: re-reading the partition from it",
            extra={"topic": tp.topic, "partition": tp.partition, "offset": offset},
        )
        faust_commits.seek_soon(self.app.consumer, tp, offset, self._truncated)

    def _truncated(self, tp: Any, want: int, first: int) -> None:
        """The log no longer holds ``want``..``first - 1`` (retention, ``delete_records``):
        they cannot be processed by anyone, so the partition goes on from ``first``. Counted
        and logged loudly: those messages were lost before this worker could read them."""
        if self.next_offset.get(tp) == want:
            self.next_offset[tp] = first
        self.truncated += first - want
        TRUNCATED_OFFSETS.labels(tp.topic).inc(first - want)
        log.error(
            "offsets %d..%d of %s[%d] were removed from the log before they were processed; "
            "going on from %d",
            want,
            first - 1,
            tp.topic,
            tp.partition,
            first,
            extra={"topic": tp.topic, "partition": tp.partition, "lost": first - want},
        )

    def processor(self, stream: Any) -> Any:
        """A Faust stream processor: raises :class:`faust.exceptions.Skip` for skipped events."""

        def in_order(value: Any) -> Any:
            event = stream.current_event
            if event is not None and not self.admit(event.message):
                raise Skip()
            return value

        return in_order
