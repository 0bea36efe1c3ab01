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
with :data:`STATELESS_RANKING` (see README, "Delivery").
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from streams.lag import LagReader
from streams.replay import ReplayStats
from streams.settings import REPO_ROOT, Settings
from tests.integration.live_harness import Procs, env_for, read_topic

#: the pipeline worker's roles (the stateful group); the FM runs alone with ``embed``
PIPELINE_AGENTS = "history,speculate,verify,aggregate,neighbours"
#: settings update for runs compared with the simulator (the recurrence counts restart cold)
STATELESS_RANKING: dict[str, Any] = {"verifier_rank_by": "vm"}
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
    if not path.exists():
        from models.data.columns import iter_events
        from models.data.synthetic import SyntheticConfig, generate
        from models.data.traffic import write_traffic

        world = generate(SyntheticConfig(n_users=30, n_items=300, days=2.0, k=20, seed=5))
        write_traffic(
            path, iter_events(world.requests, world.impressions), {"dataset": "synthetic-faults"}
        )
    return path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a test's own broker or Redis)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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

    def start_pipeline_worker(self, name: str = "pipeline", data_dir: Path | None = None) -> None:
        """A stateful pipeline worker; a second one in the group needs its own ``data_dir``
        (RocksDB locks its table files), given as its cache dir."""
        env = {"SOLARIS_CACHE_DIR": str(data_dir)} if data_dir is not None else None
        self.start(name, "worker", "--agents", PIPELINE_AGENTS, env=env)

    def group(self, suffix: str) -> str:
        return f"{self.settings.topic_prefix}-{suffix}"


@contextmanager
def fault_pipeline(
    settings: Settings,
    log_dir: Path,
    ranker: bool = False,
    fm_env: dict[str, str] | None = None,
    timeout_s: float = 180,
) -> Iterator[FaultProcs]:
    """Pipeline worker + FM worker (+ ranker) on ``settings``' broker and store, started and
    joined (groups Stable) before yielding; every child is stopped on exit."""
    from streams.demo import wait_for_groups
    from streams.topics import create_topics

    create_topics(settings)
    procs = FaultProcs(settings, log_dir)
    try:
        procs.start_pipeline_worker()
        procs.start("fm", "worker", "--agents", "embed", env=fm_env)
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
Pair = tuple[int, int, int]


@dataclass
class LossReport:
    """What a faulted run kept, against its own topics and a clean simulator run."""

    verified: int = 0  #: distinct (user, item, time) in ``verified``
    verified_duplicates: int = 0  #: extra copies of a pair in ``verified`` (re-verification)
    embedding_duplicates: int = 0  #: extra copies in ``embeddings`` (FM redeliveries)
    missing_in_store: list[tuple[int, int]] = field(default_factory=list)
    stale_in_store: list[tuple[int, int]] = field(default_factory=list)  #: older time than verified
    missing_in_embeddings: list[Pair] = field(default_factory=list)
    aggregates: int = 0
    aggregate_mismatch: list[str] = field(default_factory=list)  #: vs the run's own embeddings
    only_live: list[Pair] = field(default_factory=list)  #: verified, not by the simulator
    only_simulated: list[Pair] = field(default_factory=list)
    aggregate_vs_simulator: list[str] = field(default_factory=list)  #: count / time / key set
    histories_differing: int = 0  #: pairs embedded with another history than the simulator's

    def problems(self) -> list[str]:
        """Each way in which something was lost or counted twice (empty = nothing lost)."""
        checks: dict[str, list[Any]] = {
            "verified pairs missing in the store": self.missing_in_store,
            "pairs stored with an older event time than verified": self.stale_in_store,
            "verified pairs missing in the embeddings topic": self.missing_in_embeddings,
            "aggregates differing from the run's own embeddings": self.aggregate_mismatch,
            "pairs verified live but not by the simulator": self.only_live,
            "pairs verified by the simulator but not live": self.only_simulated,
            "aggregates differing from the simulator's (count, time, users)": (
                self.aggregate_vs_simulator
            ),
        }
        return [f"{len(v)} {k}, e.g. {v[:3]}" for k, v in checks.items() if v]

    def assert_nothing_lost(self) -> None:
        assert self.verified > 0, "nothing was verified: the run did not exercise the pipeline"
        assert self.aggregates > 0, "no aggregate in the store"
        problems = self.problems()
        assert not problems, "; ".join(problems)


def _verified(settings: Settings) -> tuple[Counter[Pair], dict[Pair, tuple[Any, ...]]]:
    from schemas.codec import Codec
    from schemas.limits import Limits
    from schemas.records import ProposalBatch

    codec = Codec(Limits(max_candidates=settings.max_candidates))
    seen: Counter[Pair] = Counter()
    histories: dict[Pair, tuple[Any, ...]] = {}
    for _, value in read_topic(settings, settings.topic("verified")):
        b = codec.decode(value, ProposalBatch)
        hist = (tuple(b.history_items), tuple(b.history_labels), tuple(b.history_times_ms))
        for item in b.item_ids:
            seen[(b.user_id, item, b.event_time_ms)] += 1
            histories[(b.user_id, item, b.event_time_ms)] = hist
    return seen, histories


def _folded_aggregates(settings: Settings) -> tuple[Counter[Pair], dict[int, Any]]:
    """Copies of each pair in ``embeddings`` and each user's aggregate folded from them (topic
    order per partition = the aggregate agent's order) by the engine's own aggregator."""
    from schemas.codec import Codec
    from schemas.records import EmbeddingBatch
    from streams.engine.aggregator import AggregateState, RollingAggregator

    codec = Codec()
    aggregator = RollingAggregator(settings.aggregate_window_ms)
    copies: Counter[Pair] = Counter()
    states: dict[int, AggregateState] = {}
    last: dict[int, Any] = {}
    for _, value in read_topic(settings, settings.topic("embeddings")):
        rec = codec.decode(value, EmbeddingBatch)
        copies.update((rec.user_id, i, rec.event_time_ms) for i in rec.item_ids)
        agg = aggregator.add(states.setdefault(rec.user_id, AggregateState()), rec.pairs())
        if agg is not None:
            last[rec.user_id] = agg
    return copies, last


def _store_values(settings: Settings) -> dict[bytes, bytes]:
    import redis

    client = redis.Redis.from_url(settings.store_url, socket_timeout=10)
    try:
        keys = sorted(client.scan_iter(match=f"{settings.key_prefix}:*", count=1000))
        values = client.mget(keys) if keys else []
    finally:
        client.close()
    return {k: v for k, v in zip(keys, values, strict=True) if isinstance(v, bytes)}


def check_nothing_lost(settings: Settings, traffic: Path, bundle: Path) -> LossReport:
    """Read the run's ``verified`` and ``embeddings`` topics and the store back, run the
    simulator on the same traffic, and report every difference (see the module docstring)."""
    from store.keys import KeyLayout
    from store.values import decode_vector

    report = LossReport()
    verified, histories = _verified(settings)
    report.verified = len(verified)
    report.verified_duplicates = sum(n - 1 for n in verified.values())
    copies, folded = _folded_aggregates(settings)
    report.embedding_duplicates = sum(n - 1 for n in copies.values())
    report.missing_in_embeddings = sorted(set(verified) - set(copies))

    layout, stored = KeyLayout(settings.key_prefix), _store_values(settings)
    newest: dict[tuple[int, int], int] = {}
    for u, i, t in verified:
        newest[(u, i)] = max(t, newest.get((u, i), t))
    for (u, i), t in sorted(newest.items()):
        raw = stored.get(layout.pair(u, i))
        if raw is None:
            report.missing_in_store.append((u, i))
        elif decode_vector(raw).event_time_ms < t:
            report.stale_in_store.append((u, i))

    live_aggs = {
        u: decode_vector(stored[layout.aggregate(u)])
        for u in folded
        if layout.aggregate(u) in stored
    }
    report.aggregates = len(live_aggs)
    for u, want in sorted(folded.items()):
        got = live_aggs.get(u)
        if got is None:
            report.aggregate_mismatch.append(f"user {u}: no aggregate in the store")
        elif (got.count, got.event_time_ms) != (want.count, want.event_time_ms) or not np.allclose(
            got.array(), want.array(), rtol=0, atol=1e-6
        ):
            report.aggregate_mismatch.append(
                f"user {u}: store count {got.count} t {got.event_time_ms}, "
                f"folded count {want.count} t {want.event_time_ms}"
            )
    _compare_with_simulator(settings, traffic, bundle, report, histories, stored)
    return report


def _compare_with_simulator(
    settings: Settings,
    traffic: Path,
    bundle: Path,
    report: LossReport,
    histories: dict[Pair, tuple[Any, ...]],
    stored: dict[bytes, bytes],
) -> None:
    """The clean run: the simulator on the same traffic with the same settings and bundle."""
    from models.data.traffic import read_traffic
    from store.values import decode_vector
    from streams.models_loader import load_models
    from streams.simulate.config import sim_config_from_settings
    from tests.integration.value_parity import simulated_values

    models, _ = load_models(settings, bundle)
    sim = simulated_values(
        read_traffic(traffic),
        sim_config_from_settings(settings, models.fm.dim),
        models,
        settings.key_prefix,
    )
    report.only_live = sorted(set(histories) - set(sim.histories))
    report.only_simulated = sorted(set(sim.histories) - set(histories))
    report.histories_differing = sum(
        1 for k, h in sim.histories.items() if k in histories and histories[k] != h
    )
    live_aggs = {k: v for k, v in stored.items() if k.endswith(b":agg")}
    for key in sorted(live_aggs.keys() | sim.aggregates.keys()):
        if key not in live_aggs or key not in sim.aggregates:
            side = "live" if key in live_aggs else "simulator"
            report.aggregate_vs_simulator.append(f"{key.decode()} only in the {side} run")
            continue
        a, b = decode_vector(live_aggs[key]), decode_vector(sim.aggregates[key])
        if (a.count, a.event_time_ms) != (b.count, b.event_time_ms):
            report.aggregate_vs_simulator.append(
                f"{key.decode()}: live count {a.count} t {a.event_time_ms}, "
                f"simulator count {b.count} t {b.event_time_ms}"
            )


def print_measured(scenario: str, measured: dict[str, Any]) -> None:
    """One line per scenario in the test output (``pytest -s``) for the README's fault matrix."""
    body = ", ".join(
        f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in measured.items()
    )
    print(f"\nFAULT MATRIX {scenario}: {body}")
