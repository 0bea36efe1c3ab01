"""``pipeline``: the live pipeline's sustained events/s with bounded consumer lag.

One deployment (pipeline worker + FM worker, real Kafka and Redis) receives synthetic traffic at a
paced rate in steps of ``step_s`` seconds: the rate doubles while the pipeline keeps up, then is
bisected (geometric mean) between the last rate it kept up with and the first it did not, after
letting the backlog drain. A step *keeps up* when the total consumer lag of the workers' groups,
sampled every second, does not grow over the last half of the step: its least-squares slope is
below 5 % of the input rate (a pipeline 5 % too slow would grow at exactly that slope). The
sustained rate is the highest step that kept up.

Alongside, the replay producer's own maximum rate (the same ``replay_events`` into topics nobody
consumes) bounds what any pipeline could be fed from one producer on this machine.

Event time runs ~1000× faster than wall time here, so the neighbour refresh (every 10 min of event
time by default) is set to every day of event time, i.e. every 10–60 s of wall time: close to the
wall-clock cadence it has on live traffic, instead of several KNN rebuilds a second.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BenchResult, machine_info, ratio, redis_version
from bench.cpu import CpuMeter, broker_pids, redis_pids
from bench.live import PIPELINE_ROLES, LiveRun
from bench.workload import live_workload
from schemas.records import ImpressionEvent, RequestEvent
from streams.lag import LagReader
from streams.replay import replay_events
from streams.settings import Settings

Event = RequestEvent | ImpressionEvent
#: Topics each worker group consumes (changelogs are written, not consumed, in steady state).
GROUP_TOPICS = {
    "pipeline": ("requests", "impressions", "speculated", "embeddings"),
    "fm": ("verified",),
}
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """Rate ladder and durations; :meth:`smoke` is the seconds-long variant the tests run."""

    step_s: float = 20.0
    start_rate: float = 200.0  #: events/s of the first step
    factor: float = 2.0
    max_steps: int = 7
    bisections: int = 2
    growth_tolerance: float = 0.05  #: max lag slope over the last half, as a share of the rate
    producer_probe_events: int = 30_000
    drain_timeout_s: float = 120.0

    @classmethod
    def smoke(cls) -> PipelineConfig:
        return cls(
            step_s=4.0, start_rate=40.0, max_steps=1, bisections=0, producer_probe_events=300
        )


class LagSeries:
    """Samples the total lag of the workers' groups every second in a background thread."""

    def __init__(self, run: LiveRun) -> None:
        self.settings = run.settings
        self.topics = {
            f"{run.prefix}-{g}": [run.settings.topic(t) for t in ts]
            for g, ts in GROUP_TOPICS.items()
        }
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-lag", daemon=True)

    def __enter__(self) -> LagSeries:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        reader = LagReader(self.settings)
        try:
            while not self._stop.is_set():
                now = time.perf_counter()
                try:
                    total = sum(p.lag for g, ts in self.topics.items() for p in reader.lag([g], ts))
                    self.samples.append((now, total))
                except Exception:  # a failed sample is a gap in the series, not a failed run
                    pass
                self._stop.wait(max(0.0, 1.0 - (time.perf_counter() - now)))
        finally:
            reader.close()

    def between(self, start: float, end: float) -> list[tuple[float, int]]:
        return [(t - start, lag) for t, lag in self.samples if start <= t <= end]


def paced(events: Iterator[Event], rate: float, count: int) -> Iterator[Event]:
    """``count`` events of ``events`` at ``rate`` per second (sleeps only when 5 ms ahead)."""
    start = time.perf_counter()
    for k, ev in enumerate(itertools.islice(events, count)):
        ahead = start + k / rate - time.perf_counter()
        if ahead > 0.005:
            time.sleep(ahead)
        yield ev


def lag_slope(series: list[tuple[float, int]]) -> float | None:
    """Least-squares slope (lag per second) over the last half of ``series``."""
    if len(series) < 4:
        return None
    last = series[len(series) // 2 :]
    t = np.array([s for s, _ in last], np.float64)
    lag = np.array([v for _, v in last], np.float64)
    return float(np.polyfit(t, lag, 1)[0])


def next_rate(history: list[tuple[float, bool]], cfg: PipelineConfig) -> float | None:
    """The next step's rate from ``(rate, kept_up)`` so far, or None when the search is done.

    Multiply by ``factor`` until a step fails (divide while even the first fails), then take
    ``bisections`` geometric means between the best rate kept up with and the lowest failed one.
    """
    ok = max((r for r, kept in history if kept), default=0.0)
    bad = min((r for r, kept in history if not kept), default=math.inf)
    if math.isinf(bad) or ok == 0.0:
        if len(history) >= cfg.max_steps:
            return None
        return history[-1][0] * (cfg.factor if math.isinf(bad) else 1.0 / cfg.factor)
    first_bad = next(i for i, (_, kept) in enumerate(history) if not kept)
    if len(history) - 1 - first_bad >= cfg.bisections:
        return None
    return math.sqrt(ok * bad)


def paced_step(
    run: LiveRun,
    lags: LagSeries,
    events: Iterator[Event],
    rate: float,
    cfg: PipelineConfig,
    cpu: CpuMeter,
) -> dict[str, Any]:
    count = max(1, int(rate * cfg.step_s))
    start = time.perf_counter()
    cpu_before = cpu.read()
    stats = replay_events(run.settings, paced(events, rate, count))
    time.sleep(max(0.0, start + cfg.step_s - time.perf_counter()) + 1.0)  # one more lag sample
    cpu_after = cpu.read()
    run.children.check()
    series = lags.between(start, time.perf_counter())
    slope = lag_slope(series)
    achieved = stats.messages / stats.seconds if stats.seconds else 0.0
    return {
        "target_events_per_s": rate,
        "events": stats.messages,
        "achieved_events_per_s": achieved,
        "lag_slope_per_s": slope,
        "max_lag": max((v for _, v in series), default=0),
        "kept_up": slope is not None
        and slope <= cfg.growth_tolerance * rate
        and achieved >= 0.9 * rate  # the producer itself must have kept the pace
        and stats.messages == count,
        "lag_series": series,
        # CPU of each process over the step (its events, and whatever backlog it worked off)
        "cpu_us_per_event": CpuMeter.per_event_us(cpu_before, cpu_after, stats.messages),
    }


def burst_step(
    run: LiveRun, events: Iterator[Event], count: int, cpu: CpuMeter, timeout_s: float
) -> dict[str, Any]:
    """``count`` events sent as fast as the producer goes, timed until every group committed
    everything: the workers' capacity with full batches, and the CPU per event *processed*
    (a paced step past saturation gives CPU per event offered and a noisy lag slope instead).
    ``target_events_per_s`` is 0: the step has no pace."""
    start = time.perf_counter()
    cpu_before = cpu.read()
    stats = replay_events(run.settings, itertools.islice(events, count))
    drained = drain_seconds(run, timeout_s)
    cpu_after = cpu.read()
    run.children.check()
    seconds = None if drained is None else time.perf_counter() - start
    return {
        "target_events_per_s": 0.0,
        "burst": True,
        "events": stats.messages,
        "seconds": seconds,  # None: not drained within the timeout
        "achieved_events_per_s": stats.messages / seconds if seconds else 0.0,
        "kept_up": seconds is not None,
        "cpu_us_per_event": CpuMeter.per_event_us(cpu_before, cpu_after, stats.messages),
    }


def drain_seconds(run: LiveRun, timeout_s: float) -> float | None:
    """Seconds until every group consumed everything (None on timeout)."""
    reader = LagReader(run.settings)
    try:
        topics = [run.settings.topic(t) for ts in GROUP_TOPICS.values() for t in ts]
        start = time.perf_counter()
        drained = reader.wait_drained(reader.groups(), topics, timeout_s=timeout_s, poll_s=0.5)
        return time.perf_counter() - start if drained else None
    finally:
        reader.close()


def _producer_max(
    settings: Settings, bundle: Path, traffic: Path, n: int, log_dir: Path
) -> dict[str, Any]:
    from models.data.traffic import read_traffic

    with LiveRun(settings, bundle, log_dir) as probe:  # topics only: nothing consumes them
        stats = replay_events(probe.settings, itertools.islice(read_traffic(traffic), n))
    return {"events": stats.messages, "seconds": stats.seconds, "events_per_s": stats.rate}


def start_pipelines(run: LiveRun, n: int) -> None:
    """Start ``n`` pipeline workers: ``pipeline`` alone, else ``pipeline1..n``, each with its
    own Faust state dir."""
    if n == 1:
        run.start("pipeline", PIPELINE_ROLES)
        return
    for k in range(1, n + 1):
        run.start(f"pipeline{k}", PIPELINE_ROLES, own_state=True)


def cpu_meter(run: LiveRun) -> CpuMeter:
    """The worker processes of ``run``, the broker and the Redis of the store URL."""
    from urllib.parse import urlparse

    workers = dict(run.children.pids())
    port = urlparse(run.settings.store_url).port or 6379
    return CpuMeter(
        {
            "pipeline": [pid for name, pid in workers.items() if name.startswith("pipeline")],
            "fm": [workers["fm"]],
            "broker": broker_pids(),
            "redis": redis_pids(port),
        }
    )


def run_pipeline(
    settings: Settings, cfg: PipelineConfig | None = None, smoke: bool = False
) -> BenchResult:
    """Producer probe, then the rate ladder on one live deployment; everything is removed after."""
    from models.data.traffic import read_traffic

    cfg = cfg or (PipelineConfig.smoke() if smoke else PipelineConfig())
    machine = machine_info({"redis": redis_version(settings.store_url)})
    traffic, bundle = live_workload(settings, smoke)
    log_dir = settings.cache_dir / "run" / "bench-logs"
    producer = _producer_max(settings, bundle, traffic, cfg.producer_probe_events, log_dir)
    env = {"SOLARIS_NEIGHBOUR_INTERVAL_MS": str(DAY_MS)}
    steps: list[dict[str, Any]] = []
    exhausted = False
    with LiveRun(settings, bundle, log_dir, env) as run:
        run.start("pipeline", PIPELINE_ROLES)
        run.start("fm", "embed")
        run.wait_ready(list(GROUP_TOPICS))
        cpu = cpu_meter(run)
        events = iter(read_traffic(traffic))
        rate: float | None = cfg.start_rate
        with LagSeries(run) as lags:
            while rate is not None:
                step = paced_step(run, lags, events, rate, cfg, cpu)
                steps.append(step)
                if step["events"] < int(rate * cfg.step_s):
                    exhausted = True
                    break
                if not step["kept_up"]:
                    step["drain_s"] = drain_seconds(run, cfg.drain_timeout_s)
                    if step["drain_s"] is None:
                        break
                rate = next_rate([(s["target_events_per_s"], s["kept_up"]) for s in steps], cfg)
        time.sleep(1.5)  # workers flush the shared counters about once a second
        counters = {f: run.counter(f) for f in ("verified", "embedded", "fm_batches")}
    sustained = max((s["achieved_events_per_s"] for s in steps if s["kept_up"]), default=None)
    best = max(
        (s for s in steps if s["kept_up"]), key=lambda s: s["achieved_events_per_s"], default=None
    )
    results: dict[str, Any] = {
        "sustained_events_per_s": sustained,
        # at the sustained step (where the machine is busiest while keeping up); per step too
        "cpu_us_per_event": None if best is None else best["cpu_us_per_event"],
        "producer_max": producer,
        "step_s": cfg.step_s,
        "growth_tolerance": cfg.growth_tolerance,
        "steps": steps,
        "traffic_exhausted": exhausted,
        "pipeline_counters": counters,
        "neighbour_interval_ms": DAY_MS,
    }
    ratios = {"sustained_over_producer_max": ratio(sustained, producer["events_per_s"])}
    return BenchResult("pipeline", machine, results, dict(ratios), {}, smoke)


def pipeline_table(res: BenchResult) -> list[list[str]]:
    """Rows ``target ev/s | achieved | lag slope/s | max lag | kept up | CPU`` per step."""
    rows = []
    for s in res.results["steps"]:
        slope = s["lag_slope_per_s"]
        cpu = s.get("cpu_us_per_event") or {}

        def us(name: str, cpu: dict[str, Any] = cpu) -> str:
            value = cpu.get(name)
            return "n/a" if value is None else f"{value:.0f}"

        parts = " / ".join(us(n) for n in ("pipeline", "fm", "broker", "redis"))
        rows.append(
            [
                f"{s['target_events_per_s']:.0f}",
                f"{s['achieved_events_per_s']:.0f}",
                "n/a" if slope is None else f"{slope:.1f}",
                str(s["max_lag"]),
                "yes" if s["kept_up"] else "**no**",
                f"{us('total')} ({parts})",
            ]
        )
    return rows
