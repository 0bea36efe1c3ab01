"""Progress of long commands as log lines when nobody sees the spinner.

rich draws its progress bar only on a terminal: a ``solaris simulate --sweep`` redirected to a
file (CI, ``nohup``) printed nothing for over an hour between loading the models and its report.
:class:`ProgressLog` passes each description to rich and, off a terminal, also logs it, at most
once per ``interval_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import Progress, TaskID

log = logging.getLogger(__name__)


class ProgressLog:
    """``update(task, message)``: the spinner's text, plus a throttled log line off a terminal."""

    def __init__(
        self,
        progress: Progress,
        console: Console,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.progress, self.interval_s, self.clock = progress, interval_s, clock
        self.logs = not console.is_terminal
        self._last: float | None = None

    def update(self, task: TaskID, message: str) -> None:
        self.progress.update(task, description=message)
        if not self.logs:
            return
        now = self.clock()
        if self._last is None or now - self._last >= self.interval_s:
            self._last = now
            log.info("progress: %s", message, extra={"op": "progress", "progress": message})
