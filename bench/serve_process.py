"""``solaris serve`` as a child process (the ``serve-http`` benchmark and the integration test).

:func:`feature_server` starts ``python -m streams.cli serve`` on a free loopback port with the
given ``SOLARIS_*`` overrides, waits until ``/healthz`` answers 200, yields its base URL, then
stops it with SIGTERM (SIGKILL after a grace period) and checks nothing is left running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import free_port
from streams.settings import REPO_ROOT

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


@dataclass
class ServerProcess:
    """A running server: its URL, process, log file, and exit code once stopped."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    returncode: int | None = field(default=None)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """``GET`` ``path``: status and body (error statuses too)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as res:
                return int(res.status), res.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()


def _wait_healthy(server: ServerProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"solaris serve exited (rc {server.proc.returncode}):\n{server.log_text()[-4000:]}"
            )
        try:
            status, body = server.get("/healthz", timeout_s=1.0)
            if status == 200 and json.loads(body).get("store_reachable"):
                return
            last = f"{status} {body[:200]!r}"
        except (OSError, ValueError) as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise RuntimeError(f"solaris serve not healthy after {timeout_s:g} s ({last})")


@contextmanager
def feature_server(
    overrides: Mapping[str, str],
    log: Path,
    start_timeout_s: float = START_TIMEOUT_S,
    args: Sequence[str] = (),
) -> Iterator[ServerProcess]:
    """Run ``solaris serve`` (plus ``args``) with the environment plus ``overrides`` until the
    block ends."""
    port = free_port()
    env = {
        **os.environ,
        **overrides,
        "SOLARIS_SERVE_PORT": str(port),
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "serve", "--host", "127.0.0.1", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = ServerProcess(f"http://127.0.0.1:{port}", proc, log)
    try:
        _wait_healthy(server, start_timeout_s)
        yield server
    finally:
        server.returncode = _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM (a graceful stop), SIGKILL after ``STOP_TIMEOUT_S``; the exit code."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return int(proc.returncode)
