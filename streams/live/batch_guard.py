"""Every agent batch is finished, or the worker stops without acknowledging it.

Why: Faust acks a ``take_events`` batch in the ``finally`` around its yield, and its agent-error
handler commits, so an exception that escapes an agent loses the batch it was in (issue 24: a
dead letter the producer refused cost 44 of 200 valid requests). Errors that are not the
message's fault (``INFRA_ERRORS``: a broker that refuses or cannot be reached, a delivery that
failed) therefore never escape: the whole batch is run again with exponential backoff. While
it is retried the worker reports not ready (``/readyz`` check ``batches_finishing``). After
``attempts`` tries the process exits at once (``os._exit``) with :data:`EXIT_STUCK`: nothing
acks the batch, so the partitions' next owner (or this worker, restarted) reads it again.

A retried batch is processed again from its first event: agents save table state only after
their sends are delivered, store writes are idempotent by key, and consumers downstream accept
duplicates (at-least-once), so the retry gives the values of a clean run. A retry sends again
what the failed try had already delivered (a batch's sends fail or succeed one by one, and a
message that timed out may still have reached the broker), so its messages carry the try's
number (``streams.live.sends.ATTEMPT_HEADER``): a reader can tell such a copy
from a message sent twice for another reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiokafka.errors
import confluent_kafka

from schemas.remote_registry import RegistryUnavailable
from store.errors import StoreRefused
from streams.engine.steps.embed import ModelUnavailable
from streams.live.metrics import AGENT_BATCH_RETRIES
from streams.live.sends import BATCH_ATTEMPT, DeliveryFailed

log = logging.getLogger(__name__)
#: infrastructure failures: not the message's fault, so never a dead letter
INFRA_ERRORS: tuple[type[BaseException], ...] = (
    aiokafka.errors.KafkaError,
    confluent_kafka.KafkaException,
    DeliveryFailed,
    ModelUnavailable,  # the FM failed on every message of a group: the model's fault, not theirs
    StoreRefused,  # the store refused a write (NOPERM, OOM, ...): not retried in place
    RegistryUnavailable,  # a new schema id seen while the schema registry is unreachable
    OSError,  # the machine's: a RocksDB table read or write, a full disk, a reset connection
    MemoryError,  # the worker's, not the message's: a dead letter would lose a good message
)
#: exit status of a worker that gave up on a batch (EX_TEMPFAIL: try again later)
EXIT_STUCK = 75


def _halt(status: int) -> None:
    """Stop now: no Faust shutdown (which would ack the batch in flight and commit)."""
    logging.shutdown()
    os._exit(status)


def backoff_s(attempt: int, first_s: float, max_s: float) -> float:
    """Seconds to wait after failed try ``attempt`` (1-based): doubling from ``first_s``."""
    return float(min(max_s, first_s * 2 ** (attempt - 1)))


class BatchGuard:
    """Runs one agent's batches (see the module). One per agent; not thread-safe."""

    def __init__(
        self,
        agent: str,
        attempts: int,
        first_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        halt: Callable[[int], None] = _halt,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self.agent = agent
        self.attempts = attempts
        self.first_backoff_s = first_backoff_s
        self.max_backoff_s = max_backoff_s
        self._halt = halt
        self._sleep = sleep
        #: monotonic time the batch being retried first failed; None when none is
        self.stuck_since: float | None = None
        self.retries = 0  #: failed tries since start (each retried or fatal)

    @property
    def finishing(self) -> bool:
        """False while a batch is being retried (readiness)."""
        return self.stuck_since is None

    async def run(self, handle: Callable[[], Awaitable[None]]) -> None:
        """Run ``handle`` (one batch, start to finish) until it completes without an
        infrastructure error; any other exception propagates (a bug: Faust restarts the agent)."""
        attempt = 0
        while True:
            attempt += 1
            token = BATCH_ATTEMPT.set(attempt)
            try:
                await handle()
            except INFRA_ERRORS as exc:
                self.retries += 1
                AGENT_BATCH_RETRIES.labels(self.agent).inc()
                if self.stuck_since is None:
                    self.stuck_since = time.monotonic()
                if attempt >= self.attempts:
                    log.critical(
                        "agent %s gave up on a batch after %d tries; exiting without acking it",
                        self.agent,
                        attempt,
                        extra={"agent": self.agent, "error": repr(exc)[:500]},
                    )
                    self._halt(EXIT_STUCK)
                    raise  # only reached when ``halt`` returns (tests)
                wait = backoff_s(attempt, self.first_backoff_s, self.max_backoff_s)
                log.warning(
                    "agent %s batch failed (%s); retrying the whole batch in %.1f s",
                    self.agent,
                    type(exc).__name__,
                    wait,
                    extra={"agent": self.agent, "attempt": attempt, "error": repr(exc)[:500]},
                )
                await self._sleep(wait)
            else:
                self.stuck_since = None
                return
            finally:
                BATCH_ATTEMPT.reset(token)
