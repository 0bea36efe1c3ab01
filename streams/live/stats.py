"""Live counters shared by workers and the ranker through one Redis hash per role.

Prometheus metrics are per process; ``solaris coverage`` and the demo's final table need totals
across processes, so every process also adds its counts to ``<key_prefix>:stats:<role>``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import redis
from redis.cluster import RedisCluster

from streams.settings import Settings

#: stats live in Redis next to the features; other backends have no shared counters
STATS_BACKENDS = frozenset({"redis", "redis-cluster"})
T = TypeVar("T")


def stats_client(settings: Settings, timeout_s: float) -> Any:
    """A client for the stats hashes: a cluster client on Redis Cluster (each hash is one key,
    so every command of a stats pipeline goes to one node)."""
    if settings.store_backend == "redis-cluster":
        return RedisCluster.from_url(
            settings.store_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
    return redis.Redis.from_url(
        settings.store_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
    )


class LiveStats:
    """``HINCRBY``/``HSET`` on a stats hash; errors are swallowed (monitoring must not stall work)."""

    def __init__(self, settings: Settings, role: str) -> None:
        self.key = f"{settings.key_prefix}:stats:{role}"
        self._client = stats_client(settings, 1.0)

    def add(self, counts: dict[str, int | float]) -> None:
        with contextlib.suppress(redis.RedisError):
            pipe = self._client.pipeline(transaction=False)
            for field, value in counts.items():
                if isinstance(value, float):
                    pipe.hincrbyfloat(self.key, field, value)
                else:
                    pipe.hincrby(self.key, field, value)
            pipe.execute()

    def set(self, values: dict[str, float | int | str]) -> None:
        with contextlib.suppress(redis.RedisError):
            self._client.hset(self.key, mapping=values)  # type: ignore[arg-type]

    def close(self) -> None:
        self._client.close()


def read_stats(settings: Settings) -> dict[str, dict[str, float]]:
    """All stats hashes by role (``ranker``, ``pipeline``), values as floats."""
    client = stats_client(settings, 2.0)
    try:
        out = {}
        for role in ("ranker", "pipeline"):
            raw = client.hgetall(f"{settings.key_prefix}:stats:{role}")
            out[role] = {_text(k): float(v) for k, v in raw.items()}
        return out
    finally:
        client.close()


def _text(key: bytes | str) -> str:
    """Hash field names arrive as bytes (no decode_responses on this client)."""
    return key.decode() if isinstance(key, bytes) else key


class LatestValueWriter(Generic[T]):
    """Hands the newest value to ``write`` on a daemon thread (started at the first value).

    For totals, not increments: a value not yet written is replaced by a newer one. The caller
    never waits on the write, so a slow or frozen Redis (each write may wait out its client's
    timeout) delays the shared numbers, never the requests being served. :meth:`close` writes
    the last value before it returns (or gives up after ``timeout_s``).
    """

    def __init__(self, write: Callable[[T], None], name: str = "stats-writer") -> None:
        self._write = write
        self._name = name
        self._cond = threading.Condition()
        self._pending: T | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def put(self, value: T) -> None:
        with self._cond:
            self._pending = value
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                value, self._pending = self._pending, None
            if value is None:  # closed, and nothing left to write
                return
            with contextlib.suppress(Exception):  # monitoring must not kill its thread
                self._write(value)
