"""Store writes in the pipeline retry until the store answers: offsets are not committed while a
write is pending (the agent does not move on), so a store outage delays but never loses data.

Only errors that another try can cure are retried here (unreachable, reset, timed out). A
refusal (:class:`~store.errors.StoreRefused`: NOPERM, WRONGTYPE, OOM) propagates at once: the
agent's batch guard reruns the batch a few times with backoff, then the worker stops without
acking it, instead of retrying the same refused write forever (issue 24, item 8)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    wait_exponential,
)

from store.errors import StoreError, StoreRefused
from streams.live.metrics import STORE_ERRORS
from streams.live.offload import STORE_POOL, in_pool

log = logging.getLogger(__name__)
T = TypeVar("T")


async def write_with_retry(op: str, fn: Callable[[], T], max_wait_s: float = 5.0) -> T:
    """Call ``fn`` in the store thread pool until it stops raising :class:`StoreError`
    (exponential backoff, async sleep): the event loop never waits on the store."""

    def _log(state: object) -> None:
        STORE_ERRORS.labels(op).inc()
        log.warning(
            "store write failed; retrying",
            extra={"op": op, "attempt": getattr(state, "attempt_number", 0)},
        )

    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(StoreError) & retry_if_not_exception_type(StoreRefused),
        wait=wait_exponential(multiplier=0.05, max=max_wait_s),
        before_sleep=_log,
        reraise=True,
    ):
        with attempt:
            return await in_pool(STORE_POOL, fn)
    raise AssertionError("unreachable")  # pragma: no cover
