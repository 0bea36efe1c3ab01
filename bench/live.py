"""A throwaway live deployment for one benchmark: unique topics and keys, worker processes, cleanup.

Workers are the real ``solaris worker`` processes (as ``make demo`` starts them), configured
through ``SOLARIS_*`` variables of their environment. Everything a run creates carries its own
prefix, and :meth:`LiveRun.close` removes it: child processes (TERM, then KILL), topics (incl.
Faust changelogs), consumer groups, store keys and the Faust data directories.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.request
from pathlib import Path

import redis

from bench.common import delete_keys, run_id
from schemas.records import ProposalBatch
from streams.app.demo import Children, solaris_cmd
from streams.codecs import make_codec
from streams.kafka_clients import make_producer
from streams.lag import wait_for_groups
from streams.run_cleanup import delete_run
from streams.settings import Settings
from streams.topics import create_topics

log = logging.getLogger(__name__)
PIPELINE_ROLES = "history,speculate,verify,aggregate,neighbours"


def scrape(port: int, name: str) -> float | None:
    """One sample of a worker's Prometheus metric (None while the endpoint is not up).

    Unlike the shared stats hash, which workers flush about once a second, these counters move
    the moment the worker counts, so they time the first and last write to within a poll.
    """
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1.0) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


class LiveRun:
    """Topics, keys and worker processes under one fresh prefix; use as a context manager."""

    def __init__(
        self,
        settings: Settings,
        bundle: Path,
        log_dir: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        prefix = run_id("bench")
        self.settings = settings.model_copy(
            update={"topic_prefix": prefix, "key_prefix": prefix, "bundle_dir": bundle}
        )
        self.log_dir = log_dir / prefix  # one folder per run: concurrent runs keep their logs
        self.env = dict(os.environ)
        self.env.update(
            SOLARIS_TOPIC_PREFIX=prefix,
            SOLARIS_KEY_PREFIX=prefix,
            SOLARIS_BUNDLE_DIR=str(bundle),
            PYTHONUNBUFFERED="1",
        )
        self.env.update(env or {})
        self.children = Children()
        self._stats = redis.Redis.from_url(settings.store_url, socket_timeout=2.0)

    @property
    def prefix(self) -> str:
        return self.settings.topic_prefix

    def __enter__(self) -> LiveRun:
        create_topics(self.settings)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(
        self, name: str, roles: str, metrics_port: int | None = None, own_state: bool = False
    ) -> None:
        """Start ``solaris worker --agents roles`` (log: ``<log_dir>/<prefix>/<name>.log``).

        ``metrics_port`` makes it serve Prometheus metrics there (see :func:`scrape`).
        ``own_state`` gives it a Faust / RocksDB data dir of its own, for several workers of one
        group on this host (:meth:`close` removes ``<state root>/<prefix>-*``, these included).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        args = [*solaris_cmd(), "worker", "--agents", roles]
        if metrics_port is not None:
            args += ["--metrics-port", str(metrics_port)]
        env = self.env
        if own_state:
            state = self.settings.faust_state_root / f"{self.prefix}-{name}"
            env = env | {"SOLARIS_STATE_DIR": str(state)}
        self.children.start(name, args, env, self.log_dir)

    def wait_ready(self, groups: list[str], timeout_s: float = 120.0) -> None:
        """Block until the workers' consumer groups are stable; raise if a worker died."""
        try:
            wait_for_groups(self.settings, [f"{self.prefix}-{g}" for g in groups], timeout_s)
        finally:
            self.children.check()

    def counter(self, field: str, role: str = "pipeline") -> int:
        """One field of the workers' shared stats hash (``streams.live.stats``), 0 when absent.

        Workers flush it about once a second: fine for totals, too coarse to time a run.
        """
        raw = self._stats.hget(f"{self.prefix}:stats:{role}", field)
        return int(float(raw)) if raw is not None else 0

    def produce_verified(self, messages: list[ProposalBatch]) -> float:
        """Write ``messages`` to the ``verified`` topic (keyed by user); returns the seconds taken."""
        codec = make_codec(self.settings)
        producer = make_producer(
            self.settings, {"linger.ms": 5, "queue.buffering.max.messages": 500_000}
        )
        topic = self.settings.topic("verified")
        start = time.perf_counter()
        for m in messages:
            while True:
                try:
                    producer.produce(
                        topic,
                        key=str(m.user_id).encode(),
                        value=codec.encode(m),
                        timestamp=m.event_time_ms,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        if producer.flush(60):
            raise RuntimeError("verified messages not delivered within 60 s")
        return time.perf_counter() - start

    def close(self) -> None:
        """Stop the workers, then delete everything this run created (best effort, logged)."""
        self.children.stop()
        self._stats.close()
        delete_keys(self.settings.store_url, self.prefix)
        delete_run(self.settings, self.prefix)
