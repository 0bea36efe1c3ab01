"""Blocking work of the Faust agents runs in bounded thread pools, never on the event loop.

A store write that waits on a slow Redis (up to its socket timeout), an ONNX batch (tens of
milliseconds) or a counter flush used to run on Faust's event loop, stalling every agent of the
worker and its consumer heartbeats. The agents now ``await`` them in these pools, so Kafka I/O
and other agents overlap them; each agent still awaits its own call before moving on (agents
run with concurrency 1), which keeps per-partition order and at-least-once semantics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

#: store writes and counter flushes (the Redis client's connection pool is thread-safe)
STORE_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="solaris-store")
#: ONNX inference (one thread: onnxruntime parallelises inside a call; batches stay ordered)
MODEL_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solaris-model")
#: the neighbour refresh (index build + every active user's query): seconds of CPU at scale,
#: which on the event loop would stall heartbeats past the session timeout (a rebalance loop)
NEIGHBOUR_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solaris-neighbours")


async def in_pool(
    pool: ThreadPoolExecutor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``fn(*args, **kwargs)`` in ``pool``, awaited without blocking the event loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(pool, lambda: fn(*args, **kwargs))
