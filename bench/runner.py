"""Runs benchmarks by name, writes their JSON files and renders their Markdown reports.

``solaris bench <name>`` and ``make bench`` go through here, so the files and tables are the same
whichever way a benchmark is started. Benchmark modules are imported only when run (``fm`` and
``pipeline`` pull in onnxruntime, Kafka clients and the traffic generator).
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, BenchResult, machine_line, markdown_table, summary_table
from streams.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Spec:
    """Where a benchmark lives: ``module.run(settings, None, smoke)`` and ``module.table(res)``."""

    module: str
    run: str
    table: str
    header: tuple[str, ...]
    title: str


BENCHES: dict[str, Spec] = {
    "store": Spec(
        "bench.storage",
        "run_store",
        "store_table",
        ("layout", "key B", "value B", "MEMORY USAGE B", "used_memory B/pair", "MiB per 1 M"),
        "Redis bytes per stored pair (d = 64)",
    ),
    "serve": Spec(
        "bench.serve",
        "run_serve",
        "serve_table",
        ("candidates", "method", "p50 ms", "p99 ms", "p999 ms", "keys/call", "value B/call"),
        "FeatureReader.lookup vs floor (one raw MGET round trip) vs naive (GET per key)",
    ),
    "serve-http": Spec(
        "bench.serve_http",
        "run_serve_http",
        "serve_http_table",
        ("candidates", "method", "p50 ms", "p99 ms", "p999 ms", "mean ms"),
        "solaris serve over HTTP (binary, JSON) vs the in-process FeatureReader.lookup",
    ),
    "fm": Spec(
        "bench.fm",
        "run_fm",
        "fm_table",
        (
            "batch",
            "bare pairs/s",
            "engine pairs/s",
            "engine/bare",
            "sequential/bare",
            "CPU µs/pair",
        ),
        "FM throughput: bare onnxruntime vs Embedder (+ in-memory store) vs live worker",
    ),
    "pipeline": Spec(
        "bench.pipeline",
        "run_pipeline",
        "pipeline_table",
        (
            "target ev/s",
            "achieved ev/s",
            "lag slope /s",
            "max lag",
            "kept up",
            "CPU µs/event: total (pipeline / fm / broker / redis)",
        ),
        "Live pipeline: paced replay, lag sampled every second",
    ),
    "fuse-verify": Spec(
        "bench.fuse_verify",
        "run_fuse_verify",
        "fuse_table",
        (
            "target ev/s",
            "mode",
            "round",
            "achieved ev/s",
            "max lag",
            "kept up",
            "CPU µs/event: total (pipeline / fm / broker / redis)",
        ),
        "The speculated hop: separate verify agent vs verify fused into speculate (A/B)",
    ),
    "scale-out": Spec(
        "bench.scale_out",
        "run_scale_out",
        "scale_out_table",
        (
            "pipeline + FM workers",
            "events",
            "replay s",
            "first send to lag 0 s",
            "events/s",
            "pairs per worker (verified / embedded)",
        ),
        "1 + 1 vs 2 + 2 workers on 4 partitions, timed replay until lag 0",
    ),
    "state": Spec(
        "bench.state_tier",
        "run_state",
        "state_table",
        ("per request of 50 candidates", "p50 ms", "p99 ms"),
        "State tier: decoding a stored FM user state in the ranker vs vm_solaris vs the whole FM",
    ),
    "steps": Spec(
        "bench.steps",
        "run_steps",
        "steps_table",
        ("step", "messages", "CPU µs/message batched", "one at a time", "batched / one"),
        "Engine steps alone, per message: batches as the live agents run them vs batches of one",
    ),
    "memory": Spec(
        "bench.memory",
        "run_memory",
        "memory_table",
        (
            "worker",
            "RSS MiB warm",
            "half",
            "end",
            "max",
            "slope MiB / 100k events",
            "end / half",
            "CPU µs / event",
        ),
        "Worker RSS over a 2-hour-of-event-time replay with 10x the demo's users",
    ),
}
ORDER = (
    "store",
    "serve",
    "serve-http",
    "fm",
    "state",
    "steps",
    "pipeline",
    "scale-out",
    "memory",
)


def run_bench(
    name: str, settings: Settings, smoke: bool, json_path: Path | None, **options: Any
) -> BenchResult:
    """Run one benchmark and write its JSON (default ``bench/results/<name>.json``);
    ``options`` go to the benchmark's run function (e.g. the memory bench's population)."""
    spec = BENCHES[name]
    module = importlib.import_module(spec.module)
    run: Callable[..., BenchResult] = getattr(module, spec.run)
    started = time.perf_counter()
    result = run(settings, None, smoke, **options)
    result.results.setdefault("wall_seconds", time.perf_counter() - started)
    result.write(json_path or RESULTS_DIR / f"{name}.json")
    return result


def report(result: BenchResult) -> str:
    """The benchmark's Markdown section: title, machine, its detail table and its ratios."""
    spec = BENCHES[result.bench]
    table: Callable[[BenchResult], list[list[str]]] = getattr(
        importlib.import_module(spec.module), spec.table
    )
    parts = [
        f"### {result.bench}: {spec.title}" + (" (smoke)" if result.smoke else ""),
        f"Machine: {machine_line(result.machine)}",
        markdown_table(spec.header, table(result)),
        markdown_table(["bench", "ratio", "value", "target", "met"], result.ratio_rows()),
    ]
    if result.bench == "pipeline":
        parts.append(_pipeline_line(result))
    return "\n\n".join(parts)


def _pipeline_line(result: BenchResult) -> str:
    sustained = result.results.get("sustained_events_per_s")
    producer = result.results["producer_max"]["events_per_s"]
    return (
        f"Pipeline sustained: {'none' if sustained is None else f'{sustained:,.0f}'} events/s "
        f"with bounded lag; replay producer alone: {producer:,.0f} events/s."
    )


def run_all(
    settings: Settings, smoke: bool, out_dir: Path, echo: Callable[[str], None]
) -> tuple[list[BenchResult], list[str]]:
    """Every benchmark in :data:`ORDER` (one failing does not stop the others).

    Writes ``<out_dir>/<name>.json`` and ``<out_dir>/summary.json`` (the summary table as Markdown
    plus every ratio with its target); returns the results and the names that failed.
    """
    results: list[BenchResult] = []
    failed: list[str] = []
    for name in ORDER:
        echo(f"running {name} ...")
        try:
            res = run_bench(name, settings, smoke, out_dir / f"{name}.json")
        except Exception as exc:  # report and go on: the other benchmarks still mean something
            log.exception("benchmark %s failed", name)
            echo(f"{name} FAILED: {exc}")
            failed.append(name)
            continue
        results.append(res)
        echo(report(res))
    if results:
        # the fm run knows which onnxruntime provider ran; prefer its description
        machine = next((r.machine for r in results if "fm_provider" in r.machine), None)
        summary = "\n\n".join(
            [
                "## SOLARIS benchmarks" + (" (smoke)" if smoke else ""),
                f"Machine: {machine_line(machine or results[0].machine)}",
                summary_table(results),
                *(_pipeline_line(r) for r in results if r.bench == "pipeline"),
            ]
        )
        doc = {
            "machine": machine or results[0].machine,
            "ratios": {r.bench: r.ratios for r in results},
            "targets": {r.bench: r.to_json()["targets"] for r in results},
            "failed": failed,
            "markdown": summary,
        }
        (out_dir / "summary.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
        echo(summary)
    return results, failed
