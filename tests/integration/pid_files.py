"""Signal a service by its pid file only while the pid is still that service's.

A pid file outlives its process (kill -9 leaves it), and this machine reuses pids within
minutes (``pid_max`` 32768, thousands of processes per test run): a stale pid can name a test
worker, which a SIGKILL or SIGSTOP meant for a broker would then take down. The scripts under
``infra/`` check the command line before they signal; so do the tests, through this.
"""

from __future__ import annotations

from pathlib import Path


def checked_pid(path: Path, program: str) -> int:
    """The pid in ``path`` if that process's command line names ``program``; raises
    ``ProcessLookupError`` when it is gone and ``RuntimeError`` when the pid is another's."""
    pid = int(path.read_text().strip())
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        raise ProcessLookupError(f"pid {pid} of {path}: no such process") from None
    cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
    if program not in cmdline:
        raise RuntimeError(f"pid {pid} of {path} is not {program} any more: {cmdline[:200]!r}")
    return pid
