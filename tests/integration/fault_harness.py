"""Shared helpers of the fault-matrix tests: a timed replay with faults injected mid-flight.

Unlike the lockstep tests, a timed replay (``replay --speed``) keeps several requests in flight
in every stage when a fault hits, which is what a fault matrix must exercise. The API:

- :func:`fault_traffic` — a few hundred requests of the tiny bundle's synthetic world (cached);
- :class:`FaultProcs` / :func:`fault_pipeline` — the pipeline + FM workers (+ ranker) wired to the
  broker and store of *the given settings* (so a test can point them at its own broker or Redis
  on other ports), with per-process extra environment;
- :class:`TimedReplay` — ``replay_file`` at a speed in a background thread;
- :func:`wait_for`, :func:`pair_keys`, :func:`wait_caught_up` — waiting and measuring;
- :func:`check_nothing_lost` — the *nothing lost* verdict (:class:`LossReport`): every verified
  pair is in the store with its newest event time and in the ``embeddings`` topic; every user
  aggregate equals the one folded from the run's own ``embeddings`` topic by the engine's
  aggregator (redeliveries counted once) and has the simulator's count and event time; the set
  of verified pairs is the simulator's (clean, uninterrupted run of the same traffic).

The simulator comparison needs a verifier ranking with no in-memory state: build the settings
with :data:`STATELESS_RANKING` (see docs/live-pipeline.md, "Delivery").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streams.lag import LagReader
from streams.replay import ReplayStats
from streams.settings import REPO_ROOT, Settings
from tests.integration.live_harness import Procs, env_for, written_once

#: the pipeline worker's roles (the stateful group); the FM runs alone with ``embed``
PIPELINE_AGENTS = "history,speculate,verify,aggregate,neighbours"
#: settings update for *timed* runs compared with the simulator: the recurrence counts restart
#: cold after a crash; and the in-flight timeout is off (= refresh_after): these replays run at
#: thousands of times real time, where 30 min of event time is a fraction of a second of wall
#: time, less than the pipeline's own latency, so pairs still on their way would be proposed
#: again (the simulator's FM answers at once). Lockstep runs keep the default.
STATELESS_RANKING: dict[str, Any] = {
    "verifier_rank_by": "vm",
    "pair_in_flight_timeout_ms": Settings.model_fields["refresh_after_ms"].default,
}
#: consumer-group suffix -> topics it consumes (for lag checks that must not pass vacuously
#: while a group is rebalancing and its members own nothing)
GROUP_TOPICS = {
    "pipeline": ("requests", "impressions", "speculated", "embeddings"),
    "fm": ("verified",),
}


def fault_traffic(path: Path) -> Path:
    """Deterministic synthetic traffic of the tiny bundle's world (30 users, 300 items): about
    400 requests over 2 days, users coming back within minutes (so requests of one user are in
    flight together). Written once; later calls reuse the file."""
    from models.data.columns import iter_events
    from models.data.synthetic import SyntheticConfig, generate
    from models.data.traffic import write_traffic

    def write(tmp: Path) -> None:
        world = generate(SyntheticConfig(n_users=30, n_items=300, days=2.0, k=20, seed=5))
        write_traffic(
            tmp, iter_events(world.requests, world.impressions), {"dataset": "synthetic-faults"}
        )

    return written_once(path, write)


class FaultProcs(Procs):
    """:class:`Procs` whose children use the settings' broker, store and cache dir (the plain
    harness passes only topic/key prefixes, so children would use the default services)."""

    def start(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``solaris <args>`` as ``name`` (log ``<log_dir>/<name>.log``, appended on a
        restart); ``env`` overrides variables for this process only."""
        s = self.settings
        full = env_for(s) | {
            "SOLARIS_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
            "SOLARIS_STORE_URL": s.store_url,
            "SOLARIS_VERIFIER_RANK_BY": s.verifier_rank_by,
        }
        with (self.log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "streams.cli", *args],
                cwd=REPO_ROOT,
                env=full | (env or {}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def start_pipeline_worker(
        self,
        name: str = "pipeline",
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """A stateful pipeline worker; a second one in the group needs its own ``data_dir``
        (RocksDB locks its table files), given as its state dir; ``env``: more variables."""
        more = {"SOLARIS_STATE_DIR": str(data_dir)} if data_dir is not None else {}
        self.start(name, "worker", "--agents", PIPELINE_AGENTS, env=more | (env or {}))

    def group(self, suffix: str) -> str:
        return f"{self.settings.topic_prefix}-{suffix}"


@contextmanager
def fault_pipeline(
    settings: Settings,
    log_dir: Path,
    ranker: bool = False,
    fm_env: dict[str, str] | None = None,
    timeout_s: float = 180,
    fm_web_port: int | None = None,
    pipeline_env: dict[str, str] | None = None,
) -> Iterator[FaultProcs]:
    """Pipeline worker + FM worker (+ ranker) on ``settings``' broker and store, started and
    joined (groups Stable) before yielding; every child is stopped on exit. ``fm_web_port``:
    the FM worker serves ``/readyz`` there; ``fm_env``, ``pipeline_env``: more variables for
    that worker (e.g. a test hook's)."""
    from streams.lag import wait_for_groups
    from streams.topics import create_topics

    create_topics(settings)
    procs = FaultProcs(settings, log_dir)
    try:
        procs.start_pipeline_worker(env=pipeline_env)
        web = [] if fm_web_port is None else ["--web-port", str(fm_web_port)]
        procs.start("fm", "worker", "--agents", "embed", *web, env=fm_env)
        groups = [procs.group("pipeline"), procs.group("fm")]
        if ranker:
            procs.start("ranker", "ranker")
            groups.append(procs.group("ranker"))
        try:
            wait_for_groups(settings, groups, timeout_s=timeout_s)
        except TimeoutError:
            procs.alive()
            raise
        yield procs
    finally:
        procs.stop_all()


class TimedReplay:
    """``replay_file(settings, traffic, speed)`` in a background thread, so a test can inject
    faults while requests are in flight. The producer buffers and retries while the broker is
    away (librdkafka's default 5 min delivery timeout), so a broker restart loses nothing."""

    def __init__(self, settings: Settings, traffic: Path, speed: float) -> None:
        self._args = (settings, traffic, speed)
        self._thread = threading.Thread(target=self._run, name="timed-replay", daemon=True)
        self._stats: ReplayStats | None = None
        self._error: BaseException | None = None
        self.started_at = 0.0

    @staticmethod
    def speed_for(traffic: Path, wall_s: float) -> float:
        """The speed that plays the traffic's requests in about ``wall_s`` seconds."""
        from models.data.traffic import load_requests

        t = load_requests(traffic).event_time_ms
        return (int(t.max()) - int(t.min())) / 1000.0 / wall_s

    def _run(self) -> None:
        from streams.replay import replay_file

        try:
            self._stats = replay_file(*self._args)
        except BaseException as exc:  # re-raised in join()
            self._error = exc

    def start(self) -> TimedReplay:
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float = 180) -> ReplayStats:
        """Wait for the end of the replay; raises what the replay raised."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"replay still running after {timeout_s:.0f} s")
        if self._error is not None:
            raise self._error
        assert self._stats is not None
        return self._stats


def hook_env(tmp_path: Path, name: str, source: str, **variables: str) -> dict[str, str]:
    """Environment for a child that runs ``source`` as its ``sitecustomize`` (a test hook
    staging a fault inside that process only), plus ``variables``."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(source)
    return {"PYTHONPATH": f"{folder}{os.pathsep}{REPO_ROOT}", **variables}


def replay_until_pairs(
    settings: Settings, traffic: Path, pairs: int, wall_s: float = 30
) -> TimedReplay:
    """Start a timed replay of ``traffic`` (about ``wall_s`` seconds) and wait until ``pairs``
    pair embeddings are in the store: the pipeline is well into it, not starting up."""
    replay = TimedReplay(settings, traffic, TimedReplay.speed_for(traffic, wall_s)).start()
    wait_for(f"{pairs} pairs embedded", lambda: pair_keys(settings) >= pairs, timeout_s=180)
    return replay


def wait_for(
    what: str, predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.2
) -> float:
    """Seconds until ``predicate()`` is true; raises ``AssertionError`` naming ``what`` on
    timeout. Any other exception counts as false (e.g. the broker is still away); an
    ``AssertionError`` (a child process died) propagates."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if predicate():
                return time.monotonic() - start
        except AssertionError:
            raise
        except Exception:
            pass
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def pair_keys(settings: Settings) -> int:
    """Pair embeddings in the store under the settings' key prefix (Redis)."""
    import redis

    client = redis.Redis.from_url(settings.store_url, socket_timeout=5)
    try:
        return sum(1 for _ in client.scan_iter(match=f"{settings.key_prefix}:*:p:*", count=1000))
    finally:
        client.close()


def caught_up(settings: Settings, reader: LagReader) -> bool:
    """True when every group of :data:`GROUP_TOPICS` has committed every message of every
    partition it consumes (asked per topic, so a group whose members own nothing during a
    rebalance does not count as caught up)."""
    for suffix, topics in GROUP_TOPICS.items():
        rows = reader.lag([f"{settings.topic_prefix}-{suffix}"], map(settings.topic, topics))
        if not rows or any(r.lag for r in rows):
            return False
    return True


def wait_caught_up(settings: Settings, procs: Procs, timeout_s: float = 180) -> float:
    """Seconds until :func:`caught_up` holds twice in a row (and the children stay up)."""
    from streams.lag import LagReader

    reader = LagReader(settings)
    seen = {"n": 0}

    def twice() -> bool:
        procs.alive()
        seen["n"] = seen["n"] + 1 if caught_up(settings, reader) else 0
        return seen["n"] >= 2

    try:
        return wait_for("the pipeline to catch up", twice, timeout_s, poll_s=0.3)
    finally:
        reader.close()


#: (user, item, request event time)


#: where :func:`print_measured` also writes each scenario's figures as JSON (unset: nowhere)
MEASURED_DIR_ENV = "TEST_FAULT_MATRIX_DIR"


def print_measured(scenario: str, measured: dict[str, Any]) -> None:
    """One line per scenario in the test output (``pytest -s``), for the docs' fault matrix;
    with ``TEST_FAULT_MATRIX_DIR`` set, also ``<dir>/<scenario>.json`` with the commit and
    date (the JSONs beside the matrix in docs/results/fault-matrix/)."""
    body = ", ".join(
        f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in measured.items()
    )
    print(f"\nFAULT MATRIX {scenario}: {body}")
    out = os.environ.get(MEASURED_DIR_ENV)
    if out:
        slug = re.sub(r"[^a-z0-9]+", "-", scenario.lower()).strip("-")
        write_measured_json(
            Path(out) / f"{slug}.json", {"scenario": scenario, "measured": measured}
        )


def write_measured_json(path: Path, record: dict[str, Any]) -> None:
    """``record`` with the running commit and date (``provenance``) as JSON at ``path``: the
    files committed beside the docs' tables (docs/results/)."""
    from models.results import provenance

    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**record, "provenance": provenance()}
    path.write_text(json.dumps(body, indent=1, default=str) + "\n", encoding="utf-8")
