"""``python -m bench.paced_rates``: one fresh deployment at fixed paced rates, CPU per event.

For before/after comparisons across commits (issue 23 asks for the CPU per event before and
after each change): run it alternately from two checkouts, each with its own venv, on the same
idle machine, and compare the JSONs (:func:`compare`, ``--compare A.json B.json ...``). The
workers run the checkout's code, since they are started with the running interpreter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench.common import machine_info
from bench.fuse_verify import FuseConfig, paced_deployment
from bench.workload import live_workload
from streams.settings import Settings

PROCESSES = ("total", "pipeline", "fm", "broker", "redis")


def run(
    rates: tuple[float, ...], step_s: float, env: dict[str, str], smoke: bool = False
) -> dict[str, Any]:
    """The steps of one deployment at ``rates`` with this checkout's code and the workers'
    extra environment ``env`` (e.g. a setting to compare)."""
    settings = Settings()
    traffic, bundle = live_workload(settings, smoke)
    steps = paced_deployment(settings, bundle, traffic, FuseConfig(rates, step_s, 1), env)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    label = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    return {
        "commit": commit,
        "env": env,
        "label": label,
        "machine": machine_info({}),
        "steps": steps,
    }


def compare(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per commit (and workers' env) and rate: the median over its runs of each process's CPU
    µs per event."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    by: dict[tuple[str, float], list[dict[str, float]]] = {}
    for r in runs:
        for s in r["steps"]:
            if s.get("cpu_us_per_event"):
                name = f"{r['commit']} {r.get('label', '')}".strip()
                by.setdefault((name, s["target_events_per_s"]), []).append(s["cpu_us_per_event"])
    for (commit, rate), cpus in by.items():
        out.setdefault(commit, {})[f"{rate:.0f}"] = {
            p: statistics.median(c[p] for c in cpus)
            for p in PROCESSES
            if all(c.get(p) is not None for c in cpus)
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="400,800,1600", help="events/s, comma-separated")
    parser.add_argument("--step-s", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write this run's result here")
    parser.add_argument(
        "--env", action="append", default=[], help="KEY=VALUE for the workers (repeatable)"
    )
    parser.add_argument("--compare", type=Path, nargs="+", help="runs to compare (no run)")
    args = parser.parse_args()
    if args.compare:
        runs = [json.loads(p.read_text()) for p in args.compare]
        print(json.dumps(compare(runs), indent=1))
        return
    env = dict(kv.split("=", 1) for kv in args.env)
    result = run(tuple(float(r) for r in args.rates.split(",")), args.step_s, env)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
