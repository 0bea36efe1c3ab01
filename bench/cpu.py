"""CPU time of the processes a benchmark drives, from ``/proc/<pid>/stat`` (Linux).

Throughput alone hides where the machine's time goes: on 2 cores, issue 11's profile put each
event at ~610 µs of CPU spread over the pipeline worker, the FM worker, the broker and Redis.
:class:`CpuMeter` reads user + system time of each named process (and its live descendants)
before and after a measured window, so a benchmark reports CPU µs per event per process next
to events/s (issue 23). Processes it cannot find count as absent, never as zero.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces)."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def child_pids(parent: int) -> list[int]:
    """Live processes whose parent is ``parent``."""
    out = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == parent:
                out.append(int(entry.name))
    return out


def cpu_seconds(pid: int, with_children: bool = True) -> float | None:
    """User + system CPU seconds of ``pid`` (and its live descendants); None if it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    total = (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime
    if with_children:
        for child in child_pids(pid):
            total += cpu_seconds(child) or 0.0
    return total


def pids_with(match: Callable[[str], bool]) -> list[int]:
    """Processes whose command line (arguments joined by spaces) satisfies ``match``."""
    out = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd and match(cmd):
            out.append(int(entry.name))
    return out


def broker_pids() -> list[int]:
    return pids_with(lambda cmd: "kafka.Kafka " in cmd)


def redis_pids(port: int) -> list[int]:
    return pids_with(lambda cmd: cmd.startswith("redis-server") and f":{port}" in cmd)


class CpuMeter:
    """CPU seconds of named process groups, read on demand (one instance per window)."""

    def __init__(self, groups: dict[str, Iterable[int]]) -> None:
        self.groups = {name: list(pids) for name, pids in groups.items()}

    def read(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for name, pids in self.groups.items():
            seconds = [cpu_seconds(p) for p in pids]
            known = [s for s in seconds if s is not None]
            out[name] = sum(known) if known else None
        return out

    @staticmethod
    def per_event_us(
        before: dict[str, float | None], after: dict[str, float | None], events: int
    ) -> dict[str, float | None]:
        """CPU µs per event of each group over a window (None where a group was not found),
        and ``total`` over the groups found."""
        out: dict[str, float | None] = {}
        for name, start in before.items():
            end = after.get(name)
            out[name] = (
                None
                if start is None or end is None or events <= 0
                else (end - start) * 1e6 / events
            )
        found = [v for v in out.values() if v is not None]
        out["total"] = sum(found) if found and events > 0 else None
        return out
