"""Samples the max consumer lag of the SOLARIS groups every second in a background thread."""

from __future__ import annotations

import threading
import time

from streams.errors import StreamsError
from streams.lag import LagReader
from streams.settings import Settings


class LagSampler:
    """``with LagSampler(settings) as s: ...`` then ``s.series`` = [(seconds, max lag)]."""

    def __init__(self, settings: Settings, every_s: float = 1.0) -> None:
        self.settings = settings
        self.every_s = every_s
        self.series: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-sampler", daemon=True)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def max_lag(self) -> int:
        return max((lag for _, lag in self.series), default=0)

    def _run(self) -> None:
        reader = LagReader(self.settings)
        start = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    rows = reader.lag(reader.groups())
                    self.series.append(
                        (time.monotonic() - start, max((r.lag for r in rows), default=0))
                    )
                except StreamsError:
                    pass
                self._stop.wait(self.every_s)
        finally:
            reader.close()
