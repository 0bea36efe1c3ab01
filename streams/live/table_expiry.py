"""The live table sweep: delete the users whose ledger, aggregate or representation is dead.

Which values are dead is the engine's rule (:mod:`streams.engine.steps.expiry`, the simulator
applies the same one); this module is the Faust side:

- **Per-partition clocks.** A value is judged against the newest event time its writing agent
  has processed *on the value's partition* (``verify`` for the ledger, ``aggregate`` for
  aggregates, ``speculate`` for representations), never a worker-wide clock: after a restart one partition may be processed hours
  ahead of another, and a user of the lagging one is not idle just because another partition's
  events are newer. A partition whose clock this process has not seen is not swept.
- **Atomic on the event loop.** Each candidate is re-read and judged right before its delete,
  with no await in between, so a value an agent saved since the key list was taken is never
  deleted. An agent that loaded a value before the sweep deleted it saves a value computed from
  a dead one, which the rule makes equal to one computed from none.
- **Tombstones.** ``del table[user]`` sends a tombstone to the table's changelog partition (the
  key's partition: tables are co-partitioned with the topics, keyed like them), so the
  compacted changelog, and a recovering worker, forget the user too. The sweep awaits its own
  changelog deliveries; one lost in a crash leaves the key for the next sweep.

Runs every ``SOLARIS_TABLE_SWEEP_INTERVAL_S`` (wall clock); the delete itself is invisible, so
when it runs does not matter to any output.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from streams.engine.config import EngineConfig
from streams.engine.steps.expiry import NEWEST, is_dead, lifetimes
from streams.kafka_clients import partition_for
from streams.live import metrics
from streams.live.agents.context import AgentContext, as_current, own_deliveries, user_key
from streams.live.state import read_table
from streams.live.table_clocks import PartitionClocks

log = logging.getLogger(__name__)
#: keys judged between two yields to the event loop
CHUNK = 500
#: the agent role that writes each swept table (its worker owns the table's partitions) and
#: the topic that agent reads (the table's source: co-partitioned with its changelog)
WRITER_ROLE = {
    "ledger": "verify",
    "aggregates": "aggregate",
    "reps": "speculate",
    "recent": "speculate",
}
SOURCE_TOPIC = {
    "ledger": "speculated",
    "aggregates": "embeddings",
    "reps": "requests",
    "recent": "requests",
}


def source_topic(table: str, fuse_verify: bool) -> str:
    """The topic whose events the writer of ``table`` reads (``SOLARIS_FUSE_VERIFY``: the
    speculate agent writes the ledger, from ``requests``)."""
    return "requests" if fuse_verify and table == "ledger" else SOURCE_TOPIC[table]


class _PartitionEvent:
    """Just enough of a Faust event for a table write outside a stream: Faust sends a table's
    changelog message to ``current_event().message.partition`` and checks that the event's
    ``message.topic`` has as many partitions as the changelog (the table's source topic)."""

    class _Message:
        __slots__ = ("partition", "topic")

        def __init__(self, topic: str, partition: int) -> None:
            self.topic, self.partition = topic, partition

    def __init__(self, topic: str, partition: int) -> None:
        self.message = self._Message(topic, partition)


class TableSweeper:
    """Deletes one table's dead users, in the partitions this worker holds."""

    def __init__(
        self,
        name: str,
        table: Any,
        clocks: PartitionClocks,
        cfg: EngineConfig,
        source: tuple[str, int],
    ) -> None:
        """``source``: the table's source topic and its partition count."""
        self.name, self.table, self.clocks, self.cfg = name, table, clocks, cfg
        self.source_topic, self.partitions = source
        self.lifetime_ms = lifetimes(cfg)[name]
        self.newest = NEWEST[name]
        self._events: dict[int, _PartitionEvent] = {}

    def partition_of(self, user: int) -> int:
        return partition_for(user_key(user), self.partitions)

    def expire_if_dead(self, user: int) -> bool:
        """Delete ``user``'s value if it is dead now (synchronous: nothing else runs between
        the read and the delete)."""
        partition = self.partition_of(user)
        now = self.clocks.get(self.name, partition)
        value = read_table(self.table, user)
        if now is None or value is None:
            return False
        if not is_dead(self.newest(value), now, self.lifetime_ms, self.cfg.table_expiry_grace_ms):
            return False
        event = self._events.get(partition)
        if event is None:
            event = self._events[partition] = _PartitionEvent(self.source_topic, partition)
        with as_current(event):
            del self.table[user]
        return True

    async def sweep(self, settle: Any) -> int:
        """One pass over the table's keys; returns how many users were deleted. ``settle``
        awaits the changelog deliveries of the current task (``AgentContext.settle``)."""
        with own_deliveries():
            keys = [int(k) for k in self.table]
            expired = 0
            for start in range(0, len(keys), CHUNK):
                expired += sum(self.expire_if_dead(u) for u in keys[start : start + CHUNK])
                await asyncio.sleep(0)  # let the agents run between chunks
            await settle()
        if expired:
            metrics.TABLE_USERS_EXPIRED.labels(self.name).inc(expired)
            log.info(
                "expired %d dead users of table %s",
                expired,
                self.name,
                extra={"table": self.name, "expired": expired, "kept": len(keys) - expired},
            )
        return expired


def register(ctx: AgentContext, roles: Iterable[str]) -> list[TableSweeper]:
    """A sweep timer for every table whose writing agent runs in this worker (none when the
    interval is 0)."""
    interval = ctx.settings.table_sweep_interval_s
    P = ctx.settings.topic_partitions
    roles = set(roles)
    sweepers = [
        TableSweeper(
            name,
            ctx.tables[name],
            ctx.parts.table_clocks,
            ctx.parts.config,
            (ctx.settings.topic(source_topic(name, ctx.settings.fuse_verify)), P),
        )
        for name, role in WRITER_ROLE.items()
        if role in roles and name in ctx.tables
    ]
    if interval <= 0 or not sweepers:
        return sweepers

    @ctx.app.timer(interval=interval)
    async def sweep_dead_users() -> None:
        """A failed sweep is logged and tried again at the next interval: deleting is never
        needed for a correct output, so it must never stop the worker (an exception out of a
        Faust timer crashes the app)."""
        for sweeper in sweepers:
            try:
                await sweeper.sweep(ctx.settle)
            except Exception:
                metrics.TABLE_SWEEP_FAILURES.labels(sweeper.name).inc()
                log.exception(
                    "table sweep of %s failed; next try in %.0f s", sweeper.name, interval
                )

    return sweepers
