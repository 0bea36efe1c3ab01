"""A per-message fast path in faust-streaming 0.15's consumer (see :func:`install`).

Faust's fetcher hands each fetched message to the app with
``Consumer.wait_first(callback(message), suspend_flow.wait())``: four tasks (the callback, the
suspend event, the consumer's stopped and crashed events), an ``asyncio.wait`` and three
cancellations per message. Under load the callback almost always finishes without suspending
(it puts the message into the stream buffers of the agents), so :func:`eager_wait_first`
first runs it one step inline, as Python 3.12's eager tasks do: when it completes there, no task
is made. When it suspends (a stream buffer is full, or a lock is held) the rest of it runs as a
task and Faust's own ``wait_first`` waits on that and the other events, as before: a rebalance
that sets ``suspend_flow`` still interrupts the wait.

Two things stay as they were, because without them a second worker joining and leaving
mid-replay lost or double-processed messages (``test_second_pipeline_worker_joins_and_leaves``
failed 4 runs in 5, and passed 3 of 3 with them): while the flow is suspended (a rebalance)
Faust's own path runs, and each message still costs one event-loop turn, so rebalance handlers
interleave with the fetcher message by message instead of after up to 100 messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from faust.transport.consumer import Consumer
from mode.services import WaitResults

_ORIGINAL = Consumer.wait_first


async def resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive ``coro``, already stepped once and suspended on ``yielded``, to its end.

    What an asyncio task does: wait for the future it yielded (or one loop turn for a bare
    ``yield``), then resume it; the coroutine reads the future's result or exception itself.
    A cancellation of this task cancels that future, so the coroutine sees it, as in a task.
    Only asyncio futures and bare yields occur (Faust's callbacks are asyncio coroutines).
    """
    while True:
        try:
            if yielded is None:
                await asyncio.sleep(0)
            else:
                yielded._asyncio_future_blocking = False  # taken over, as a task does
                await yielded
        except BaseException as exc:
            own = (
                yielded is not None
                and yielded.done()
                and (yielded.cancelled() or yielded.exception() is exc)
            )
            if not own:  # this task itself was interrupted: the coroutine gets it, as in a task
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value


def _close(coros: tuple[Any, ...]) -> None:
    for c in coros:
        if asyncio.iscoroutine(c):
            c.close()


async def eager_wait_first(self: Any, *coros: Any, timeout: Any = None) -> WaitResults:
    """``Service.wait_first`` that steps a first coroutine inline before making any task."""
    first = coros[0] if coros else None
    if (
        not asyncio.iscoroutine(first)
        or self._stopped.is_set()
        or self._crashed.is_set()
        or self.suspend_flow.is_set()
    ):
        return await _ORIGINAL(self, *coros, timeout=timeout)
    try:
        yielded = first.send(None)
    except StopIteration as done:
        _close(coros[1:])
        await asyncio.sleep(0)  # one loop turn per message, as before (rebalances interleave)
        return WaitResults([first], [done.value], False)
    except BaseException:
        _close(coros[1:])
        raise
    rest = asyncio.ensure_future(resume(first, yielded))
    return await _ORIGINAL(self, rest, *coros[1:], timeout=timeout)


def install() -> None:
    """Use :func:`eager_wait_first` in Faust's consumer (idempotent)."""
    Consumer.wait_first = eager_wait_first  # type: ignore[method-assign]
