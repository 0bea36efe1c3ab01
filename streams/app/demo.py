"""``solaris demo``'s live part: workers and ranker as child processes, a replay, a summary.

Starts a pipeline worker, a separate FM worker (its own consumer group, as on a GPU host) and
the ranker under a fresh topic/key prefix, replays recorded traffic (timed at ``speed`` event-time
seconds per wall second, or in lockstep), samples lag and the live counters once a second
(:class:`~streams.app.report_html.timeline.Timeline`), waits until every consumer group has drained,
scrapes the ranker's read-latency histogram, stops everything it started and returns the summary
that the table and the HTML report are drawn from. Kafka and Redis must be up.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.records import ImpressionEvent, RequestEvent
from streams.app.demo_summary import behind_summary, scrape_read_latency, summary_json
from streams.lag import wait_for_groups
from streams.settings import Settings

Report = Callable[[str], None]
#: the stages whose consumer groups must drain before the summary is read
PIPELINE_TOPICS = ("requests", "impressions", "speculated", "verified", "embeddings")
#: seconds between two progress lines while replaying
PROGRESS_EVERY_S = 5.0


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

    def pids(self) -> list[tuple[str, int]]:
        """``(name, pid)`` of every process started."""
        return [(name, proc.pid) for name, proc in self.procs]

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


@dataclass(frozen=True)
class DemoRun:
    """One run's isolated names: settings under a fresh topic/key prefix and the children's env."""

    settings: Settings
    env: dict[str, str]
    groups: list[str]
    topics: list[str]

    @classmethod
    def create(cls, settings: Settings, bundle: Path) -> DemoRun:
        run_id = time.strftime("%Y%m%d%H%M%S")
        env = demo_env(settings, run_id, bundle)
        env["SOLARIS_FAUST_COMMIT_INTERVAL_S"] = "0.1"  # fast drain detection (lockstep, end)
        run = settings.model_copy(
            update={
                "topic_prefix": env["SOLARIS_TOPIC_PREFIX"],
                "key_prefix": env["SOLARIS_KEY_PREFIX"],
                "bundle_dir": bundle,
            }
        )
        groups = [f"{run.topic_prefix}-{g}" for g in ("pipeline", "fm", "ranker")]
        return cls(run, env, groups, [run.topic(t) for t in PIPELINE_TOPICS])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for the ranker's metrics endpoint)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_children(run: DemoRun, log_dir: Path, metrics_port: int) -> Children:
    """Pipeline worker, FM worker and ranker, each in its own session, logging to ``log_dir``."""
    children = Children()
    cmd = solaris_cmd()
    agents = "history,speculate,verify,aggregate,neighbours"
    children.start("pipeline", [*cmd, "worker", "--agents", agents], run.env, log_dir)
    children.start("fm", [*cmd, "worker", "--agents", "embed"], run.env, log_dir)
    # the ranker writes scores (live quality) and serves its histogram for the report
    ranker = [*cmd, "ranker", "--metrics-port", str(metrics_port)]
    children.start("ranker", ranker, {**run.env, "SOLARIS_BIND_HOST": "127.0.0.1"}, log_dir)
    return children


class ReplayProgress:
    """Counts the requests handed to the producer (into the timeline) and prints a progress line
    (requests replayed, lag per group) at most every :data:`PROGRESS_EVERY_S` seconds."""

    def __init__(self, total: int, timeline: Any, report: Report) -> None:
        self.total = total
        self.timeline = timeline
        self.report = report
        self._printed = time.monotonic()

    def count(
        self, events: Iterable[RequestEvent | ImpressionEvent]
    ) -> Iterator[RequestEvent | ImpressionEvent]:
        for ev in events:
            if isinstance(ev, RequestEvent):
                self.timeline.replayed += 1
                self.timeline.replayed_event_ms = ev.event_time_ms
            yield ev
            # the producer asks for the next event only once this one is produced
            self.timeline.produced_event_ms = ev.event_time_ms

    def tick(self, _messages: int = 0) -> None:
        if time.monotonic() - self._printed < PROGRESS_EVERY_S:
            return
        self._printed = time.monotonic()
        last = self.timeline.last
        lag = ", ".join(
            f"{g.rsplit('-', 1)[-1]} {n:,}" for g, n in (last.lag if last else {}).items()
        )
        ranked = f", ranked {last.requests:,}" if last else ""
        behind = last.behind_ms if last else None
        fm = f"; FM {behind / 1000:,.0f} s behind in event time" if behind is not None else ""
        self.report(
            f"replayed {self.timeline.replayed:,} / {self.total:,} requests{ranked}; "
            f"lag {lag or 'not sampled yet'}{fm}"
        )


def replay(
    run: DemoRun,
    traffic: Path,
    speed: float,
    children: Children,
    timeline: Any,
    total: int,
    report: Report,
) -> Any:
    """Replay ``traffic`` timed (``speed`` > 0) or in lockstep (0); returns the ReplayStats."""
    from models.data.traffic import read_traffic
    from streams.lag import LagReader
    from streams.replay import replay_events

    progress = ReplayProgress(total, timeline, report)
    lag = LagReader(run.settings)

    def lockstep() -> None:
        children.check()
        progress.tick()
        if not lag.wait_drained(run.groups, run.topics, timeout_s=120):
            raise TimeoutError("pipeline did not drain within 120 s")

    try:
        events = progress.count(read_traffic(traffic))
        hook = lockstep if speed == 0 else None
        return replay_events(run.settings, events, speed, hook, progress.tick)
    finally:
        lag.close()


def drain(run: DemoRun, children: Children, report: Report, timeout_s: float = 900) -> float:
    """Block until every group has consumed everything; returns the seconds it took."""
    from streams.lag import LagReader

    start = time.monotonic()
    lag = LagReader(run.settings)
    try:
        while not lag.wait_drained(run.groups, run.topics, timeout_s=5):
            children.check()
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"pipeline did not drain within {timeout_s:.0f} s")
    finally:
        lag.close()
    return time.monotonic() - start


def clean_up(settings: Settings, report: Report) -> None:
    """Delete the run's topics, groups and table state (it has reported; nothing reads them)."""
    from streams.run_cleanup import delete_run

    done = delete_run(settings, settings.topic_prefix)
    report(
        f"deleted this run's {done.topics} topics, {done.groups} consumer groups and "
        f"{done.state_dirs} table-state folders (--keep-topics keeps them)"
    )


def _live_quality(run: Settings, bundle: Path, report: Report) -> dict[str, Any]:
    """Live NE / TR of what the ranker served (scores topic joined to impressions)."""
    from streams.live.quality import live_quality
    from streams.models_loader import load_models

    report("live quality: joining the ranker's scores to impressions")
    models, _ = load_models(run, bundle)
    return live_quality(run, models.fm, vm_fair=models.vm_fair)


def watched_replay(
    run: DemoRun, traffic: Path, speed: float, children: Children, total: int, report: Report
) -> tuple[Any, Any, Any, float]:
    """Replay and drain while the timeline samples lag and counters and the arrival recorder
    times each request's pipeline; returns (timeline, recorder, replay stats, drain seconds)."""
    from streams.app.demo_delays import ArrivalRecorder
    from streams.app.report_html.timeline import Timeline

    mode = "in lockstep" if speed == 0 else f"timed at {speed:,.0f}x"
    report(f"replaying {total:,} requests {mode}")
    with (
        Timeline(run.settings, run.groups, run.topics) as timeline,
        ArrivalRecorder(run.settings, lambda: timeline.produced_event_ms) as recorder,
    ):
        stats = replay(run, traffic, speed, children, timeline, total, report)
        report(f"replayed {stats.messages:,} messages in {stats.seconds:.0f} s; draining")
        drained_s = drain(run, children, report)
    return timeline, recorder, stats, drained_s


def run_demo(
    settings: Settings,
    traffic: Path,
    bundle: Path,
    log_dir: Path,
    speed: float,
    report: Report,
    offline: dict[str, Any] | None = None,
    keep_topics: bool = False,
) -> dict[str, Any]:
    """Run the live pipeline over ``traffic`` and return the summary (see :func:`summary_json`;
    plus ``timeline``, ``read_latency``, ``drain_seconds``, ``mode``, ``speed`` and the
    per-request delays of :meth:`~streams.app.demo_delays.Arrivals.outputs`).

    ``speed`` 0 = lockstep (the pipeline drains before each request: live coverage equals the
    simulator's); N > 0 = N event-time seconds per wall second, the way traffic really arrives
    (the ranker reads while the pipeline works; see docs/running.md for the speed it holds).
    ``report(msg)`` receives progress lines. Topics are created under a fresh prefix, so each run
    starts from empty topics, groups and keys; once it has reported, its topics, groups and
    Faust state are deleted unless ``keep_topics`` (store keys stay until their TTL).
    """
    from models.data.traffic import load_requests
    from models.results import provenance
    from streams.live.report import live_summary
    from streams.topics import create_topics

    started = provenance()  # the code that runs: what the docs cite for this run's figures
    run = DemoRun.create(settings, bundle)
    create_topics(run.settings)
    total = len(load_requests(traffic).event_time_ms)
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    report(f"starting workers and ranker (logs in {log_dir})")
    children = start_children(run, log_dir, port)
    try:
        wait_for_groups(run.settings, run.groups)
        children.check()
        timeline, recorder, stats, drained_s = watched_replay(
            run, traffic, speed, children, total, report
        )
        time.sleep(1.5)  # workers flush shared counters every second
        latency = scrape_read_latency(port)
    finally:
        children.stop()
    out = summary_json(live_summary(run.settings), offline, timeline.max_lag, stats)
    out["quality"] = _live_quality(run.settings, bundle, report)
    if not keep_topics:
        clean_up(run.settings, report)
    out.update(
        timeline=timeline.as_json(),
        pipeline_behind_s=behind_summary(timeline.behind_ms(until_s=stats.seconds)),
        read_latency=latency,
        **recorder.arrivals.outputs(log_dir, timed=speed > 0),
        drain_seconds=drained_s,
        speed=speed,
        provenance={**started, "bundle": bundle.name},
        mode="lockstep" if speed == 0 else f"timed, speed {speed:g}",
    )
    return out
