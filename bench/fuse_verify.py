"""``solaris bench fuse-verify``: CPU per event with and without the ``speculated`` hop.

Issue 23 asks to cut hops where the measurement shows they cost. ``SOLARIS_FUSE_VERIFY`` runs
the verify step inside the speculate agent; this bench measures both topologies on one
machine in one run: each mode gets its own fresh deployment (pipeline worker + FM worker) and
the same paced rates, and the modes alternate over ``rounds`` so slow drift of a noisy machine
falls on both. Reported per rate: the CPU µs per event of each process (``/proc``, over the
step), whether the pipeline kept up, and the ratio fused / separate of the median over rounds.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench.common import BenchResult, machine_info, ratio, redis_version
from bench.live import LiveRun
from bench.pipeline import (
    DAY_MS,
    GROUP_TOPICS,
    LagSeries,
    PipelineConfig,
    burst_step,
    cpu_meter,
    paced_step,
    start_pipelines,
)
from bench.scale_out import wait_split
from bench.workload import live_workload
from streams.lag import LagReader
from streams.settings import Settings

MODES = {"separate": "false", "fused": "true"}
PROCESSES = ("total", "pipeline", "fm", "broker", "redis")


@dataclass(frozen=True, slots=True)
class FuseConfig:
    rates: tuple[float, ...] = (400.0, 800.0, 1600.0)
    step_s: float = 20.0
    rounds: int = 2
    #: stateful pipeline worker processes (each owns some of the partitions; 1 FM worker)
    pipeline_workers: int = 1
    #: events of a final unpaced step (0: none): capacity and CPU per event processed
    burst_events: int = 0

    @classmethod
    def smoke(cls) -> FuseConfig:
        return cls(rates=(40.0,), step_s=4.0, rounds=1)


def _one_mode(
    settings: Settings, bundle: Any, traffic: Any, mode: str, cfg: FuseConfig
) -> list[dict[str, Any]]:
    steps = paced_deployment(settings, bundle, traffic, cfg, {"SOLARIS_FUSE_VERIFY": MODES[mode]})
    return [{"mode": mode, **s} for s in steps]


#: the longest the counters are waited for after the last step
DRAIN_S = 60.0


def drained_counters(run: Any, fields: tuple[str, ...]) -> dict[str, int]:
    """The deployment's shared counters once each has moved (workers flush them about once a
    second), or as they are after :data:`DRAIN_S`: a smoke run beside other jobs had sent all
    its events but not yet verified one when the counters were read 1.5 s later."""
    deadline = time.monotonic() + DRAIN_S
    time.sleep(1.5)
    counts = {f: run.counter(f) for f in fields}
    while not all(counts.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        counts = {f: run.counter(f) for f in fields}
    return counts


def paced_deployment(
    settings: Settings, bundle: Any, traffic: Any, cfg: FuseConfig, env: dict[str, str]
) -> list[dict[str, Any]]:
    """The paced steps of one fresh deployment (``cfg.pipeline_workers`` pipeline workers + one
    FM worker) with ``env`` (every rate of ``cfg``, lowest first); the last step carries the
    deployment's counters."""
    from models.data.traffic import read_traffic

    env = {"SOLARIS_NEIGHBOUR_INTERVAL_MS": str(DAY_MS), **env}
    if cfg.pipeline_workers > 1:
        env.setdefault("SOLARIS_LOG_LEVEL", "INFO")  # the rebalance lines wait_split reads
    log_dir = settings.cache_dir / "run" / "bench-logs"
    step_cfg = PipelineConfig(step_s=cfg.step_s)
    steps = []
    with LiveRun(settings, bundle, log_dir, env) as run:
        start_pipelines(run, cfg.pipeline_workers)
        run.start("fm", "embed")
        run.wait_ready(list(GROUP_TOPICS))
        if cfg.pipeline_workers > 1:  # each worker owns partitions and has recovered them
            reader = LagReader(run.settings)
            try:
                counts = {"pipeline": cfg.pipeline_workers, "fm": 1}
                wait_split(run, reader, counts, timeout_s=180.0)
            finally:
                reader.close()
        cpu = cpu_meter(run)
        events = iter(read_traffic(traffic))
        with LagSeries(run) as lags:
            for rate in cfg.rates:
                step = paced_step(run, lags, events, rate, step_cfg, cpu)
                step.pop("lag_series")
                steps.append(step)
        if cfg.burst_events:
            steps.append(burst_step(run, events, cfg.burst_events, cpu, timeout_s=600.0))
        # over the whole deployment (both modes must have verified and embedded pairs); on a
        # loaded machine the last step's events may still be in flight: wait for them (bounded)
        steps[-1]["counters"] = drained_counters(run, ("verified", "embedded"))
    return steps


def run_fuse_verify(
    settings: Settings, cfg: FuseConfig | None = None, smoke: bool = False
) -> BenchResult:
    """Both modes, alternating, ``cfg.rounds`` times; ratios of the medians per rate."""
    cfg = cfg or (FuseConfig.smoke() if smoke else FuseConfig())
    machine = machine_info({"redis": redis_version(settings.store_url)})
    traffic, bundle = live_workload(settings, smoke)
    steps: list[dict[str, Any]] = []
    for rnd in range(cfg.rounds):
        for mode in MODES if rnd % 2 == 0 else reversed(MODES):
            steps += [{"round": rnd, **s} for s in _one_mode(settings, bundle, traffic, mode, cfg)]
    medians = median_cpu(steps)
    ratios: dict[str, float | None] = {}
    for rate in cfg.rates:
        sep, fused = medians.get(("separate", rate), {}), medians.get(("fused", rate), {})
        for proc in ("total", "pipeline", "broker"):
            ratios[f"cpu_{proc}_fused_over_separate_{rate:.0f}"] = ratio(
                fused.get(proc), sep.get(proc)
            )
    results = {
        "rates": list(cfg.rates),
        "step_s": cfg.step_s,
        "rounds": cfg.rounds,
        "steps": steps,
        "median_cpu_us_per_event": {
            f"{mode}@{rate:.0f}": cpu for (mode, rate), cpu in sorted(medians.items())
        },
    }
    return BenchResult("fuse-verify", machine, results, ratios, {}, smoke)


def median_cpu(steps: list[dict[str, Any]]) -> dict[tuple[str, float], dict[str, float]]:
    """Per (mode, rate): the median over rounds of each process's CPU µs per event."""
    out: dict[tuple[str, float], dict[str, float]] = {}
    keys = {(s["mode"], s["target_events_per_s"]) for s in steps}
    for mode, rate in keys:
        mine = [
            s["cpu_us_per_event"]
            for s in steps
            if (s["mode"], s["target_events_per_s"]) == (mode, rate) and s["cpu_us_per_event"]
        ]
        out[(mode, rate)] = {
            p: statistics.median(c[p] for c in mine)
            for p in PROCESSES
            if mine and all(c.get(p) is not None for c in mine)
        }
    return out


def fuse_table(res: BenchResult) -> list[list[str]]:
    """Rows ``rate | mode | round | achieved | max lag | kept up | CPU total (per process)``."""
    rows = []
    for s in sorted(res.results["steps"], key=lambda s: (s["target_events_per_s"], s["mode"])):
        cpu = s.get("cpu_us_per_event") or {}
        parts = " / ".join("n/a" if cpu.get(p) is None else f"{cpu[p]:.0f}" for p in PROCESSES[1:])
        total = cpu.get("total")
        rows.append(
            [
                f"{s['target_events_per_s']:.0f}",
                s["mode"],
                str(s["round"]),
                f"{s['achieved_events_per_s']:.0f}",
                str(s["max_lag"]),
                "yes" if s["kept_up"] else "**no**",
                f"{'n/a' if total is None else f'{total:.0f}'} ({parts})",
            ]
        )
    return rows
