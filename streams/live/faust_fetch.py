"""How the workers' Kafka consumer fetches: ``fetch.min.bytes`` and ``fetch.max.wait.ms``.

faust-streaming 0.15 builds its worker consumer (aiokafka) with ``fetch_max_wait_ms=1500`` and
aiokafka's ``fetch_min_bytes=1``, and offers no setting for either: the broker answers a fetch as
soon as one byte is there, so at a few hundred events/s spread over 4 topics x N partitions
the consumer thread runs a fetch round trip for every few messages (issue 23's per-thread
measurement at 400 events/s: Faust's consumer thread 0.23 of a core, the event loop 0.50).
:func:`install` sets both on the consumer Faust creates (before it starts: aiokafka builds its
fetcher from them in ``start``). A larger minimum with a short wait trades at most the wait in
latency per hop for fewer, fuller fetches (``SOLARIS_CONSUMER_FETCH_MIN_BYTES``,
``SOLARIS_CONSUMER_FETCH_MAX_WAIT_MS``).
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

_ORIGINAL = AIOKafkaConsumerThread._create_worker_consumer


def install(min_bytes: int, max_wait_ms: int) -> None:
    """Make every worker consumer Faust creates from now on fetch with these (idempotent: the
    last call wins)."""

    def create(self: AIOKafkaConsumerThread, transport: Any) -> Any:
        consumer = _ORIGINAL(self, transport)
        configure(consumer, min_bytes, max_wait_ms)
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]


def configure(consumer: Any, min_bytes: int, max_wait_ms: int) -> None:
    """Set the fetch minimum and wait of an aiokafka consumer that has not started yet."""
    if not hasattr(consumer, "_fetch_min_bytes") or not hasattr(consumer, "_fetch_max_wait_ms"):
        raise RuntimeError(
            "aiokafka's consumer no longer keeps _fetch_min_bytes/_fetch_max_wait_ms: "
            "streams/live/faust_fetch.py needs updating for this aiokafka version"
        )
    consumer._fetch_min_bytes = min_bytes
    consumer._fetch_max_wait_ms = max_wait_ms
