"""Every process command line seen while a block runs (what any local user reads in ``ps``)."""

from __future__ import annotations

import threading
from pathlib import Path


class CommandLines:
    """Polls every process's ``/proc/<pid>/cmdline`` in a thread while the block runs (what
    any local user can read in ``ps``); ``lines`` holds each distinct one."""

    def __init__(self, every_s: float = 0.02) -> None:
        self.every_s = every_s
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        seen: set[str] = set()
        while not self._stop.is_set():
            for path in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    line = path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:  # the process ended
                    continue
                if line and line not in seen:
                    seen.add(line)
                    self.lines.append(line)
            self._stop.wait(self.every_s)
