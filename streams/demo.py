"""``solaris demo``: the main job end to end on this machine, then a one-table report.

Starts Kafka + Redis when they are not running, builds recorded traffic, trains small models when
none are cached, starts a pipeline worker, a separate FM worker (its own consumer group, as on a
GPU host) and the ranker as child processes, replays the traffic at a speed that finishes in a few
minutes, waits until every consumer group has drained, prints the table (coverage by tier, FM
pairs per request, speculation precision, dead letters, read latency, max lag) next to the offline
simulator's numbers for the same traffic, and stops everything it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.settings import Settings


@dataclass
class Children:
    """Child processes started by the demo, stopped (TERM, then KILL) in reverse order."""

    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(
        self, name: str, args: list[str], env: dict[str, str], log_dir: Path
    ) -> subprocess.Popen[bytes]:
        with (log_dir / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append((name, proc))
        return proc

    def check(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} (see its log)")

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def demo_env(settings: Settings, run_id: str, bundle: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SOLARIS_TOPIC_PREFIX=f"{settings.topic_prefix}-{run_id}",
        SOLARIS_KEY_PREFIX=f"{settings.key_prefix}-{run_id}",
        SOLARIS_BUNDLE_DIR=str(bundle),
        PYTHONUNBUFFERED="1",
    )
    return env


def wait_for_groups(settings: Settings, groups: list[str], timeout_s: float = 120.0) -> None:
    """Block until every consumer group exists and is Stable (workers joined and assigned)."""
    from confluent_kafka import ConsumerGroupState

    from streams.lag import LagReader

    reader = LagReader(settings)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            futs = reader.admin.describe_consumer_groups(groups)
            try:
                states = [f.result().state for f in futs.values()]
            except Exception:  # groups not created yet
                states = []
            if states and all(s == ConsumerGroupState.STABLE for s in states):
                return
            time.sleep(1.0)
    finally:
        reader.close()
    raise TimeoutError(f"consumer groups {groups} not stable after {timeout_s:.0f} s")


def summary_json(
    live: dict[str, Any], offline: dict[str, Any] | None, max_lag: int, replay: Any
) -> dict[str, Any]:
    out = dict(live)
    out["max_consumer_lag"] = max_lag
    out["replay"] = {"messages": replay.messages, "seconds": replay.seconds, "rate": replay.rate}
    if offline is not None:
        keys: tuple[str, ...] = ("cumulative", "fm_pairs_per_request", "speculation_precision")
        keys += ("ne", "transfer_ratio_at_achieved", "eval_impressions")
        out["offline"] = {k: offline[k] for k in keys if k in offline}
    return out


def _live_quality(run: Settings, bundle: Path, report: Any) -> dict[str, Any]:
    """Live NE / TR of what the ranker served (scores topic joined to impressions)."""
    from streams.live.quality import live_quality
    from streams.models_loader import load_models

    report("live quality: joining the ranker's scores to impressions")
    models, _ = load_models(run, bundle)
    return live_quality(run, models.fm)


def solaris_cmd() -> list[str]:
    return [sys.executable, "-m", "streams.cli"]


def slice_traffic(path: Path, n_requests: int, out: Path) -> Path:
    """The last ``n_requests`` requests of ``path`` with their impressions, as a new traffic file."""
    from models.data.traffic import load_requests, read_traffic, traffic_metadata, write_traffic
    from schemas.records import RequestEvent

    times = load_requests(path).event_time_ms
    if n_requests >= len(times):
        return path
    start = int(sorted(times.tolist())[len(times) - n_requests])
    keep: set[str] = set()

    def events() -> Any:
        for ev in read_traffic(path):
            if isinstance(ev, RequestEvent):
                if ev.event_time_ms >= start:
                    keep.add(ev.request_id)
                    yield ev
            elif ev.request_id in keep:
                yield ev

    meta = dict(traffic_metadata(path))
    meta.pop("format_version", None)
    meta.update(sliced_from=str(path), last_requests=n_requests)
    write_traffic(out, events(), meta)
    return out


def run_demo(
    settings: Settings,
    traffic: Path,
    bundle: Path,
    log_dir: Path,
    speed: float,
    report: Any,
    offline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the live pipeline over ``traffic`` and return the summary (see :func:`summary_json`).

    ``speed`` 0 = lockstep (the pipeline drains before each request: live coverage equals the
    simulator's); N > 0 = N event-time seconds per wall second (measures what the pipeline keeps
    up with; at high compression the ranker runs ahead of the pipeline and coverage drops).
    ``report(msg)`` receives progress lines. Infra must be up; topics are created under a fresh
    prefix, so each run starts from empty topics, groups and keys.
    """
    from models.data.traffic import load_requests
    from streams.lag import LagReader
    from streams.lag_sampler import LagSampler
    from streams.live.report import live_summary
    from streams.replay import replay_file
    from streams.topics import create_topics

    run_id = time.strftime("%Y%m%d%H%M%S")
    env = demo_env(settings, run_id, bundle)
    env["SOLARIS_FAUST_COMMIT_INTERVAL_S"] = "0.1"  # fast drain detection between requests
    run = settings.model_copy(
        update={
            "topic_prefix": env["SOLARIS_TOPIC_PREFIX"],
            "key_prefix": env["SOLARIS_KEY_PREFIX"],
            "bundle_dir": bundle,
        }
    )
    create_topics(run)
    requests = load_requests(traffic)
    children = Children()
    log_dir.mkdir(parents=True, exist_ok=True)
    cmd = solaris_cmd()
    topics = [
        run.topic(t) for t in ("requests", "impressions", "speculated", "verified", "embeddings")
    ]
    try:
        report(f"starting workers and ranker (logs in {log_dir})")
        children.start(
            "pipeline",
            [*cmd, "worker", "--agents", "history,speculate,verify,aggregate,neighbours"],
            env,
            log_dir,
        )
        children.start("fm", [*cmd, "worker", "--agents", "embed"], env, log_dir)
        children.start("ranker", [*cmd, "ranker"], env, log_dir)  # scores: live quality
        groups = [f"{run.topic_prefix}-{g}" for g in ("pipeline", "fm", "ranker")]
        wait_for_groups(run, groups)
        children.check()
        lag = LagReader(run)
        mode = "in lockstep" if speed == 0 else f"at {speed:,.0f}x"
        report(f"replaying {len(requests):,} requests {mode}")
        done = {"n": 0}

        def lockstep() -> None:
            children.check()
            done["n"] += 1
            if done["n"] % 100 == 0:
                report(f"{done['n']:,} / {len(requests):,} requests")
            if not lag.wait_drained(groups, topics, timeout_s=120):
                raise TimeoutError("pipeline did not drain within 120 s")

        try:
            with LagSampler(run) as sampler:
                stats = replay_file(run, traffic, speed, lockstep if speed == 0 else None)
                report(f"replayed {stats.messages:,} messages in {stats.seconds:.0f} s; draining")
                deadline = time.monotonic() + 900
                while not lag.wait_drained(groups, topics, timeout_s=5):
                    children.check()
                    if time.monotonic() > deadline:
                        raise TimeoutError("pipeline did not drain within 15 min")
        finally:
            lag.close()
        time.sleep(1.5)  # workers flush shared counters every second; the ranker on exit
    finally:
        children.stop()
    live = live_summary(run)
    live["quality"] = _live_quality(run, bundle, report)
    out = summary_json(live, offline, sampler.max_lag, stats)
    out["lag_series"] = sampler.series
    out["mode"] = "lockstep" if speed == 0 else f"speed {speed:g}"
    return out
