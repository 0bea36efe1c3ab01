"""LatestValueWriter: the ranker's stats publishes never wait on Redis."""

from __future__ import annotations

import threading
import time

from streams.live.stats import LatestValueWriter


def test_put_does_not_wait_for_a_blocked_write_and_the_newest_value_wins() -> None:
    release = threading.Event()
    written: list[int] = []

    def write(value: int) -> None:
        release.wait(5)  # a frozen Redis: the write hangs until released
        written.append(value)

    writer: LatestValueWriter[int] = LatestValueWriter(write)
    start = time.monotonic()
    for value in range(1, 6):
        writer.put(value)
    assert time.monotonic() - start < 0.5, "put waited for the write"
    release.set()
    writer.close()
    # at most the value already being written when the rest came, then only the newest
    assert written[-1] == 5 and len(written) <= 2 and written == sorted(written)


def test_close_writes_the_last_value_and_a_failing_write_does_not_stop_the_thread() -> None:
    written: list[int] = []

    def write(value: int) -> None:
        if value == 1:
            raise ConnectionError("redis down")
        written.append(value)

    writer: LatestValueWriter[int] = LatestValueWriter(write)
    writer.put(1)
    time.sleep(0.1)
    writer.put(2)
    writer.close()
    assert written == [2]


def test_nothing_put_means_no_thread() -> None:
    writer: LatestValueWriter[int] = LatestValueWriter(lambda v: None)
    writer.close()
    assert writer._thread is None
