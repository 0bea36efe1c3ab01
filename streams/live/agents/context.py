"""What every agent adapter shares: topics, tables, engine components and the dead-letter path."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import faust
from faust.streams import _current_event

from schemas.records import DeadLetter
from streams.engine.steps.event_time import FUTURE_EVENT_TIME, EventClock
from streams.live.batch_guard import INFRA_ERRORS, BatchGuard
from streams.live.components import Components
from streams.live.dead_letters import Origin, dead_letter_for, decode
from streams.live.ordering import PartitionOrder
from streams.live.sends import Sender
from streams.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
PROCESSING_ERROR = "processing_error"
__all__ = [
    "INFRA_ERRORS",
    "AgentContext",
    "Pending",
    "as_current",
    "origin",
    "own_deliveries",
    "user_key",
]


@dataclass
class Pending:
    """Deliveries one agent's batch sent and must see delivered before the batch is acked."""

    dead: list[Any] = field(default_factory=list)
    changelog: list[Any] = field(default_factory=list)


#: the running agent's pending deliveries: each Faust agent runs in its own task, so one
#: agent's settle never awaits (or drops) another's (issue 24, item 7)
_PENDING: contextvars.ContextVar[Pending | None] = contextvars.ContextVar(
    "solaris_pending", default=None
)


def origin(event: Any) -> Origin:
    m = event.message
    return Origin(m.topic, m.partition, m.offset)


def user_key(user_id: int) -> bytes:
    return str(user_id).encode()


@contextlib.contextmanager
def as_current(event: Any) -> Iterator[None]:
    """Make ``event`` Faust's current event while a batch is processed.

    Faust's RocksDB tables read and write the partition of the *current* event; inside a
    ``take_events`` batch that is the batch's last event, so reading another user's state
    without this would look in the wrong partition (and write its changelog there). Faust's
    own stream iteration sets the same context variable per event.
    """
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


@contextlib.contextmanager
def own_deliveries() -> Iterator[Pending]:
    """Give the current task (a timer's, not an agent's) its own pending deliveries, so
    :meth:`AgentContext.settle` awaits what this task sent and no agent's."""
    pending = Pending()
    token = _PENDING.set(pending)
    try:
        yield pending
    finally:
        _PENDING.reset(token)


class Processing:
    """:meth:`AgentContext.processing`'s context: a plain class, since it runs for every event
    (a generator-based context manager costs several times more per use)."""

    __slots__ = ("ctx", "event", "token")

    def __init__(self, ctx: AgentContext, event: Any) -> None:
        self.ctx, self.event = ctx, event

    async def __aenter__(self) -> None:
        self.token = _current_event.set(weakref.ref(self.event))

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        _current_event.reset(self.token)
        if not isinstance(exc, Exception) or isinstance(exc, INFRA_ERRORS):
            return False
        await self.ctx.dead_for(self.event, exc)
        return True


@dataclass
class AgentContext:
    """One Faust app's shared parts, handed to every agent module's ``register``."""

    app: faust.App
    settings: Settings
    parts: Components
    topics: dict[str, Any]
    tables: dict[str, Any]
    clock: EventClock
    sender: Sender
    #: deliveries sent outside any agent's batches (see :meth:`pending`)
    unowned: Pending = field(default_factory=Pending)
    #: one batch guard per agent (see :mod:`streams.live.batch_guard`)
    guards: dict[str, BatchGuard] = field(default_factory=dict)

    def pending(self) -> Pending:
        """The current agent's pending deliveries (set by :meth:`batches`)."""
        return _PENDING.get() or self.unowned

    async def send(self, topic: str, user_id: int, value: Any, event_time_ms: int) -> Any:
        """Send ``value`` (a record) keyed by user; returns the delivery future."""
        encoded = self.parts.codec.encode(value)
        return await self.sender.send(topic, user_key(user_id), encoded, event_time_ms)

    async def dead(self, dl: DeadLetter) -> None:
        """Send a dead letter; its delivery is awaited before the batch's events are acked."""
        encoded = self.parts.codec.encode(dl)
        delivery = await self.sender.send("dead-letter", dl.raw_key, encoded, None)
        self.pending().dead.append(delivery)
        self.parts.count(**{f"dead_letters_{dl.reason}": 1})

    async def settle(self) -> None:
        """Await every dead letter and table changelog message the current agent sent so far
        (a failed delivery raises: an infrastructure error, which :meth:`finish` retries)."""
        now = self.pending()
        for pending in (now.dead, now.changelog):
            while pending:
                sent = pending[:]
                pending.clear()  # in place: senders append to this same list meanwhile
                for delivery in sent:
                    await delivery

    def record_changelog(self, table: Any) -> None:
        """Keep the delivery of every changelog message ``table`` sends, for :meth:`batches`.

        Faust sends table updates through a buffer (``send_soon``) and its commit only *tries*
        to flush it: the buffer's flush gives up after 0.1 s without a send. Under load a
        commit could so cover a batch whose table updates were still unsent, and a worker
        killed or rebalanced then left older state to the partition's next owner
        (``tests/integration/test_changelog_durability.py``).
        """
        send = table.send_changelog

        def recorded(*args: Any, **kwargs: Any) -> Any:
            delivery = send(*args, **kwargs)
            self.pending().changelog.append(delivery)
            return delivery

        table.send_changelog = recorded

    async def decoded(self, event: Any, expect: type[T]) -> T | None:
        """The event's record, or None after sending it to the dead-letter topic."""
        rec = decode(self.parts.codec, event.value, expect, origin(event), event.key)
        if isinstance(rec, DeadLetter):
            await self.dead(rec)
            return None
        return rec

    async def admitted(self, event: Any, expect: type[T]) -> T | None:
        """Like :meth:`decoded`, and refuses events dated too far ahead (every input topic:
        an internal message dated past the broker's own limit would make the agent's sends fail)."""
        rec = await self.decoded(event, expect)
        if rec is None:
            return None
        t = int(rec.event_time_ms)  # type: ignore[attr-defined]
        where = (event.message.topic, event.message.partition)
        if self.clock.admit(where, t, int(time.time() * 1000)):
            return rec
        error = f"event time {t} is more than {self.clock.max_future_ms} ms ahead"
        await self.dead(
            dead_letter_for(origin(event), event.key, event.value, FUTURE_EVENT_TIME, error)
        )
        return None

    async def dead_for(self, event: Any, exc: Exception) -> None:
        """Dead-letter ``event`` for an error raised while processing it."""
        bad_record = isinstance(exc, ValueError | TypeError | KeyError)  # else: show where
        log.warning(
            "processing failed: %s",
            repr(exc)[:500],
            extra={"error": repr(exc)[:500]},
            exc_info=None if bad_record else exc,
        )
        error = f"{type(exc).__name__}: {exc}"
        dl = dead_letter_for(origin(event), event.key, event.value, PROCESSING_ERROR, error)
        await self.dead(dl)

    def processing(self, event: Any) -> Processing:
        """Any error while processing ``event`` dead-letters it (``processing_error``, with the
        error text) and the agent moves on to the next message; Kafka errors propagate."""
        return Processing(self, event)

    def batches(
        self, stream: faust.StreamT, size: int | None = None, within_ms: float | None = None
    ) -> Any:
        """The stream in batches of at most ``size`` events, waiting at most ``within_ms``
        (defaults from settings); each partition's events in offset order (see
        :mod:`streams.live.ordering`)."""
        s = self.settings
        stream.add_processor(PartitionOrder(self.app).processor(stream))
        wait_ms = s.agent_batch_max_wait_ms if within_ms is None else within_ms
        taken = stream.take_events(  # type: ignore[attr-defined]
            size or s.agent_batch_size, within=wait_ms / 1000
        )
        return self._settled(taken)

    async def _settled(self, batches: AsyncIterator[list[Any]]) -> AsyncIterator[list[Any]]:
        """``batches``, with the dead letters and table updates of each batch delivered before
        the next one is taken: Faust acks a batch's events when its ``take_events`` resumes,
        so a crash can no longer lose a dead letter or a table update whose event was already
        committed. Runs in the agent's task: its deliveries are tracked apart from other
        agents' (:meth:`pending`)."""
        if _PENDING.get() is None:
            _PENDING.set(Pending())
        async for events in batches:
            yield events
            await self.settle()

    def guard(self, agent: str) -> BatchGuard:
        """The agent's batch guard (created with the settings' retry policy)."""
        found = self.guards.get(agent)
        if found is None:
            s = self.settings
            found = self.guards[agent] = BatchGuard(
                agent, s.agent_batch_attempts, max_backoff_s=s.agent_batch_max_backoff_s
            )
        return found

    async def finish(
        self, agent: str, handle: Callable[[list[Any]], Awaitable[None]], events: list[Any]
    ) -> None:
        """Run ``handle(events)`` (one batch) and deliver what it sent; infrastructure errors
        rerun it whole, with backoff, or stop the worker without acking it (:mod:`.batch_guard`)."""

        async def whole() -> None:
            now = self.pending()
            now.dead.clear()  # a failed try's deliveries: its reruns send again
            now.changelog.clear()
            await handle(events)
            await self.settle()

        await self.guard(agent).run(whole)
