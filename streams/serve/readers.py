"""Feature readers for the server's worker threads: one :class:`FeatureReader` per thread.

A reader, and the read connections of its store, serve one thread at a time (a Redis store's
read pool is built for one reading thread), so each of the ``threads`` worker threads builds its
own reader (and store) from ``make_reader`` and keeps it; the event loop hands lookups to them.
A request that finds every thread busy waits for one, within bounds: at most ``max_waiting``
requests wait (one more is refused at once, :class:`Overloaded`: a 503), and a request that
waited longer than ``max_wait_s`` is not looked up when its turn comes (its client, with a
deadline of its own, has given up; the thread goes to the next one). Without the bounds a slow
store under many clients queued requests for seconds and spent threads on abandoned ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, TypeVar

from store.reader import FeatureReader, Lookup
from streams.serve.protocol import READ_ERRORS

log = logging.getLogger(__name__)
T = TypeVar("T")
#: how long :meth:`ReaderPool.warm` waits for every thread to build its reader
WARM_TIMEOUT_S = 30.0


class Served(NamedTuple):
    """One lookup as the server saw it."""

    found: Lookup
    #: None, or the reader counter that moved during the lookup (see ``protocol.READ_ERRORS``)
    read_error: str | None
    seconds: float


def timed_lookup(
    reader: FeatureReader, user_id: int, item_ids: Sequence[int], event_time_ms: int
) -> Served:
    """``reader.lookup`` (never raises, keeps its deadline), timed, with the reason it was cut
    short read off the reader's counters (one reader per thread: no other lookup moves them)."""
    st = reader.stats
    before = (st.timeouts, st.store_errors, st.internal_errors)
    t0 = time.perf_counter()
    found = reader.lookup(user_id, item_ids, event_time_ms)
    seconds = time.perf_counter() - t0
    after = (st.timeouts, st.store_errors, st.internal_errors)
    error = next((n for n, b, a in zip(READ_ERRORS, before, after, strict=True) if a > b), None)
    return Served(found, error, seconds)


class Overloaded(RuntimeError):
    """Refused without a lookup: too many requests waiting, or this one waited too long."""


class ReaderPool:
    """``threads`` worker threads, each with its own reader built by ``make_reader``."""

    def __init__(
        self,
        make_reader: Callable[[], FeatureReader],
        threads: int,
        max_waiting: int | None = None,
        max_wait_s: float | None = None,
    ) -> None:
        """``max_waiting``: requests that may wait for a thread (None: no bound);
        ``max_wait_s``: the longest a request waits before it is refused (None: no bound)."""
        self.threads = threads
        self.max_waiting = max_waiting
        self.max_wait_s = max_wait_s
        self._in_flight = 0  #: running and waiting requests (changed on the event loop only)
        self.refused_waiting = 0  #: refused because too many were waiting
        self.refused_late = 0  #: refused because they waited past ``max_wait_s``
        self._make_reader = make_reader
        self._local = threading.local()
        self._readers: list[FeatureReader] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="serve-read")

    def _reader(self) -> FeatureReader:
        reader: FeatureReader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._make_reader()  # opens (warms) this thread's store connections
            self._local.reader = reader
            with self._lock:
                self._readers.append(reader)
        return reader

    def warm(self) -> int:
        """Start every thread and build its reader now, not inside the first requests; returns
        the readers built (fewer only when a thread took longer than ``WARM_TIMEOUT_S``)."""
        barrier = threading.Barrier(self.threads)

        def start() -> None:
            self._reader()
            # hold this thread until all are busy, so each task lands on a new thread
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(WARM_TIMEOUT_S)

        for future in [self._executor.submit(start) for _ in range(self.threads)]:
            future.result()
        return len(self._readers)

    async def run(self, fn: Callable[[FeatureReader], T]) -> T:
        """``fn(reader)`` on a worker thread with that thread's reader; :class:`Overloaded`
        when the bounds (see the module) refuse it."""
        if self.max_waiting is not None and self._in_flight >= self.threads + self.max_waiting:
            self.refused_waiting += 1
            raise Overloaded(f"{self._in_flight - self.threads} requests already waiting")
        queued = time.perf_counter()

        def work() -> T:
            waited = time.perf_counter() - queued
            if self.max_wait_s is not None and waited > self.max_wait_s:
                self.refused_late += 1
                raise Overloaded(f"waited {waited * 1000:.0f} ms for a reader")
            return fn(self._reader())

        loop = asyncio.get_running_loop()
        self._in_flight += 1
        try:
            return await loop.run_in_executor(self._executor, work)
        finally:
            self._in_flight -= 1

    def close(self) -> None:
        """Wait for running lookups, then close every reader's store."""
        self._executor.shutdown(wait=True)
        with self._lock:
            readers, self._readers = self._readers, []
        for reader in readers:
            try:
                reader.store.close()
            except Exception:  # closing must not raise
                log.warning("closing a reader's store failed", exc_info=True)
