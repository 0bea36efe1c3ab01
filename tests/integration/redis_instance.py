"""A private redis-server for fault tests, started and stopped through ``infra/redis.sh``.

Fault tests restart, freeze (SIGSTOP) or cap the memory of Redis; doing that to the shared
instance on 6379 would break every other test running at the same time, so each fault test gets
its own server on a free port with its own data directory, and stops it at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from streams.settings import REPO_ROOT
from tests.integration.pid_files import checked_pid
from tests.ports import free_port

REDIS_SH = REPO_ROOT / "infra" / "redis.sh"


@dataclass
class RedisInstance:
    """One redis-server on ``port`` (no persistence, as ``infra/redis.sh`` starts it)."""

    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _script(self, command: str) -> None:
        env = dict(
            os.environ,
            SOLARIS_REDIS_PORT=str(self.port),
            SOLARIS_REDIS_DATA_DIR=str(self.data_dir),
        )
        done = subprocess.run(
            ["bash", str(REDIS_SH), command], env=env, capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise RuntimeError(f"infra/redis.sh {command} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) through the script; a frozen server is thawed first."""
        pid = self.pid()
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._script("stop")

    def pid(self) -> int | None:
        """The server's pid (None when it is not running), checked to be a redis-server's
        (see ``tests.integration.pid_files``)."""
        try:
            return checked_pid(self.data_dir / "redis.pid", "redis-server")
        except (OSError, ValueError):  # no file, or the process is gone
            return None

    def _signal(self, sig: signal.Signals) -> None:
        pid = self.pid()
        if pid is None:
            raise RuntimeError(f"no pid file for redis on port {self.port}")
        os.kill(pid, sig)

    def freeze(self) -> None:
        """Black-hole the server: the kernel still accepts connections, nothing answers."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def client(self, timeout_s: float = 5.0) -> redis.Redis:
        return redis.Redis.from_url(
            self.url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def info(self, section: str) -> dict[str, object]:
        client = self.client()
        try:
            return dict(client.info(section))
        finally:
            client.close()


@contextmanager
def own_redis(data_dir: Path) -> Iterator[RedisInstance]:
    """A started private Redis; stopped (and thawed if frozen) on exit. Skips without
    ``redis-server`` rather than letting the script try to install it mid-test."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server/redis-cli not installed (infra/redis.sh start installs them)")
    instance = RedisInstance(free_port(), data_dir)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()
