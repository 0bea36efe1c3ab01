"""``python -m bench.paced_rates``: one fresh deployment at fixed paced rates, CPU per event.

For before/after comparisons across commits (issue 23 asks for the CPU per event before and
after each change): run it alternately from two checkouts, each with its own venv, on the same
idle machine, and compare the JSONs (:func:`compare`, ``--compare A.json B.json ...``). The
workers run the checkout's code, since they are started with the running interpreter.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.common import machine_info
from bench.fuse_verify import FuseConfig, median_cpu, paced_deployment
from bench.workload import live_workload
from models.results import provenance
from streams.settings import Settings


def run(
    rates: tuple[float, ...],
    step_s: float,
    env: dict[str, str],
    smoke: bool = False,
    pipeline_workers: int = 1,
    burst_events: int = 0,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """The steps of one deployment at ``rates`` with this checkout's code and the workers'
    extra environment ``env`` (e.g. a setting to compare), with ``pipeline_workers`` pipeline
    worker processes (their CPU summed as ``pipeline``), then ``burst_events`` unpaced."""
    settings = settings or Settings()
    traffic, bundle = live_workload(settings, smoke)
    cfg = FuseConfig(rates, step_s, 1, pipeline_workers, burst_events)
    steps = paced_deployment(settings, bundle, traffic, cfg, env)
    made = provenance()  # the checkout whose code the workers ran, and whether it was dirty
    label = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    if pipeline_workers > 1:
        label = f"{label} pipeline_workers={pipeline_workers}".strip()
    return {
        "commit": str(made["commit"])[:7],
        "provenance": made,
        "env": env,
        "label": label,
        "pipeline_workers": pipeline_workers,
        "machine": machine_info({}),
        "steps": steps,
    }


def compare(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per commit (and workers' env) and rate: the median over its runs of each process's CPU
    µs per event (:func:`bench.fuse_verify.median_cpu`, with the run's name as the mode)."""
    steps = [
        {**s, "mode": f"{r['commit']} {r.get('label', '')}".strip()}
        for r in runs
        for s in r["steps"]
    ]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (name, rate), cpu in median_cpu(steps).items():
        if cpu:
            out.setdefault(name, {})[f"{rate:.0f}" if rate else "burst"] = cpu
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="400,800,1600", help="events/s, comma-separated")
    parser.add_argument("--step-s", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write this run's result here")
    parser.add_argument(
        "--env", action="append", default=[], help="KEY=VALUE for the workers (repeatable)"
    )
    parser.add_argument(
        "--pipeline-workers", type=int, default=1, help="pipeline worker processes (1 FM worker)"
    )
    parser.add_argument(
        "--burst", type=int, default=0, help="then this many events unpaced, timed to drained"
    )
    parser.add_argument("--compare", type=Path, nargs="+", help="runs to compare (no run)")
    args = parser.parse_args()
    if args.compare:
        runs = [json.loads(p.read_text()) for p in args.compare]
        print(json.dumps(compare(runs), indent=1))
        return
    env = dict(kv.split("=", 1) for kv in args.env)
    rates = tuple(float(r) for r in args.rates.split(",") if r)
    result = run(
        rates, args.step_s, env, pipeline_workers=args.pipeline_workers, burst_events=args.burst
    )
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
