"""How the agents' messages reach Kafka: librdkafka (default) or Faust's own producer.

Why not Faust's by default: in the FM worker (``bench fm``, batches of 128 verified messages)
sending the ``embeddings`` messages through ``faust.Topic.send`` took ~30 of ~80 ms a batch,
~200 µs a message beyond building and encoding it (Faust's and aiokafka's Python: message
futures, callbacks, the accumulator, murmur2 in Python), more than the wait for the FM itself.
librdkafka's ``produce`` takes ~4 µs a message.

What stays the same:
- the partition: :func:`streams.kafka_clients.make_producer` hashes keys like Faust (murmur2),
  on the same key bytes, so co-partitioning holds;
- the order per partition, also across retries: the producer is idempotent;
- at-least-once: :meth:`LibrdkafkaSender.send` returns a future settled by the delivery report,
  and the agents await every delivery of a batch before its events are acked (and offsets
  committed), as they did with Faust's futures;
- the record timestamp: the event time.

A message sent by a batch's retry (:mod:`streams.live.batch_guard`) carries the try's number
in the :data:`ATTEMPT_HEADER` header: the retry re-sends what the failed try had delivered, so
a reader can tell that copy from a message sent twice for another reason (a lost ledger).

Delivery reports are served by a daemon thread polling the producer; the reports of one poll
settle their futures with one wake-up of the event loop (one per message was a write to the
loop's self-pipe and a callback each: ~6 % of a core at 2,400 events/s, holding the GIL). A
full local queue makes :meth:`LibrdkafkaSender.send` wait (backpressure) instead of failing.
At exit the producer is flushed.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, Producer

from streams.kafka_clients import make_producer
from streams.settings import Settings

log = logging.getLogger(__name__)

#: seconds a full local queue waits before producing again
QUEUE_FULL_WAIT_S = 0.005
#: seconds the delivery thread blocks in one poll (also how fast it notices close)
POLL_S = 0.05
#: seconds close() waits for messages still queued
FLUSH_S = 10.0


#: the running batch's try (1 = the first), set by the batch guard; each agent runs in its own
#: task, so each sees its own
BATCH_ATTEMPT: contextvars.ContextVar[int] = contextvars.ContextVar(
    "solaris_batch_attempt", default=1
)
#: header on every message a batch's retry sends: the try's number (ASCII digits)
ATTEMPT_HEADER = "solaris-attempt"


def attempt_headers() -> list[tuple[str, str | bytes | None]] | None:
    """The headers of a send from the running batch: none on its first try (the usual case
    costs nothing), the try's number on a retry."""
    attempt = BATCH_ATTEMPT.get()
    return None if attempt == 1 else [(ATTEMPT_HEADER, str(attempt).encode())]


#: called on the loop with a delivered message's offset (before its future is settled)
OnDelivered = Callable[[int], None]
#: one delivery report: the loop waiting on it, its future, the broker's error, the topic, the
#: message's offset and who wants it
_Report = tuple[
    asyncio.AbstractEventLoop,
    asyncio.Future[None],
    KafkaError | None,
    str,
    int,
    OnDelivered | None,
]


class DeliveryFailed(RuntimeError):
    """The broker did not take a message (after librdkafka's own retries)."""


class Sender(Protocol):
    async def send(
        self, topic: str, key: bytes | None, value: bytes, timestamp_ms: int | None
    ) -> Awaitable[Any]:
        """Queue one message to SOLARIS topic ``topic`` (short name); the result is awaited
        for its delivery."""
        ...


class FaustSender:
    """Through Faust's topics (aiokafka's producer): agent unit tests, and the A/B baseline."""

    def __init__(self, topics: dict[str, Any]) -> None:
        self.topics = topics

    async def send(
        self, topic: str, key: bytes | None, value: bytes, timestamp_ms: int | None
    ) -> Awaitable[Any]:
        timestamp = None if timestamp_ms is None else timestamp_ms / 1000
        return await self.topics[topic].send(
            key=key, value=value, timestamp=timestamp, headers=attempt_headers()
        )


def sender_overrides(settings: Settings) -> dict[str, Any]:
    """librdkafka settings of the agents' producer beyond every producer's: idempotent (the
    order per partition holds across retries), the linger, and how long a delivery may take
    before it fails (then the agent's batch is run again, never acked undelivered)."""
    return {
        "enable.idempotence": True,
        "linger.ms": settings.producer_linger_ms,
        "message.timeout.ms": settings.producer_message_timeout_ms,
    }


class LibrdkafkaSender:
    """One idempotent confluent-kafka producer shared by a worker's agents (see the module)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        #: (loop, future, error, topic) of the reports served but not yet handed to their loop
        self._reports: collections.deque[_Report] = collections.deque()

    def _started(self) -> Producer:
        """The producer and its delivery thread, started at the first send."""
        with self._lock:
            if self._producer is None:
                self._producer = make_producer(self.settings, sender_overrides(self.settings))
                self._thread = threading.Thread(
                    target=self._serve_reports, args=(self._producer,), name="solaris-deliveries"
                )
                self._thread.daemon = True
                self._thread.start()
                atexit.register(self.close)
            return self._producer

    def _serve_reports(self, producer: Producer) -> None:
        while not self._closed.is_set():
            producer.poll(POLL_S)  # serves every report already in: a produce request's batch
            self._hand_over()

    def _hand_over(self) -> None:
        """Settle the reports served so far, with one wake-up of each loop that waits on them."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Report]] = {}
        reports = self._reports
        while reports:  # popleft is atomic: close() may hand over while the thread still runs
            report = reports.popleft()
            by_loop.setdefault(report[0], []).append(report)
        for loop, batch in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_settle_all, batch)

    async def send(
        self, topic: str, key: bytes | None, value: bytes, timestamp_ms: int | None
    ) -> asyncio.Future[None]:
        producer = self._started()
        name = self.settings.topic(topic)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        report = self._reporter(loop, done, name, None)
        timestamp = 0 if timestamp_ms is None else int(timestamp_ms)  # 0: librdkafka's "now"
        headers = attempt_headers()
        while True:
            try:
                producer.produce(
                    name, value, key, on_delivery=report, timestamp=timestamp, headers=headers
                )
                return done
            except BufferError:  # the local queue is full: let deliveries drain it
                await asyncio.sleep(QUEUE_FULL_WAIT_S)

    def produce_now(
        self,
        name: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        on_delivered: OnDelivered | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> asyncio.Future[None]:
        """Queue one message to the full topic ``name``'s ``partition`` without yielding to
        the loop (for callers that cannot await, such as Faust's table changelog hook); a
        full local queue blocks the caller until deliveries drain it. ``on_delivered`` gets the
        message's offset on the loop, before the future is settled."""
        producer = self._started()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        report = self._reporter(loop, done, name, on_delivered)
        while True:
            try:
                producer.produce(
                    name, value, key, partition=partition, on_delivery=report, headers=headers
                )
                return done
            except BufferError:
                time.sleep(QUEUE_FULL_WAIT_S)

    def _reporter(
        self,
        loop: asyncio.AbstractEventLoop,
        done: asyncio.Future[None],
        name: str,
        on_delivered: OnDelivered | None,
    ) -> Callable[[KafkaError | None, Any], None]:
        """librdkafka's delivery callback for one message (runs in the delivery thread)."""
        reports = self._reports

        def report(err: KafkaError | None, msg: Any) -> None:
            offset = -1 if on_delivered is None or err is not None else msg.offset()
            reports.append((loop, done, err, name, offset, on_delivered))

        return report

    def pending(self) -> int:
        """Messages queued or in flight (not yet reported)."""
        return 0 if self._producer is None else len(self._producer)

    def close(self) -> None:
        """Stop the delivery thread and flush what is still queued (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=POLL_S * 10)
        if self._producer is not None:
            left = self._producer.flush(FLUSH_S)
            self._hand_over()
            if left:
                log.warning("%d messages not delivered at close", left, extra={"messages": left})


def _settle_all(reports: list[_Report]) -> None:
    """On the loop: each report's future done, or failed with the broker's error."""
    for _loop, done, err, topic, offset, on_delivered in reports:
        if done.done():
            continue
        if err is None:
            try:
                if on_delivered is not None:
                    on_delivered(offset)
            except Exception as exc:  # e.g. the table store refused the offset: batch reruns
                done.set_exception(exc)
                continue
            done.set_result(None)
        else:
            done.set_exception(DeliveryFailed(f"delivery to {topic} failed: {err}"))


def sender_for(settings: Settings, topics: dict[str, Any]) -> Sender:
    """The sender ``settings.agent_sends`` names (``topics``: Faust's, for the Faust one)."""
    if settings.agent_sends == "faust":
        return FaustSender(topics)
    return LibrdkafkaSender(settings)
