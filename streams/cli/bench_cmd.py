"""``solaris bench serve|serve-http|fm|store|state|steps|pipeline|fuse-verify|scale-out|memory|all``:
side-by-side ratios.

Each command writes the benchmark's JSON (``--json``) and prints its Markdown tables; ``all``
writes one JSON per benchmark into a folder plus ``summary.json``. ``--smoke`` runs a seconds-long
variant that checks the plumbing only (the test suite uses it); its numbers mean nothing.
Kafka and Redis must be running (``solaris infra up``) for serve, serve-http, fm, pipeline, scale-out and memory.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Benchmarks: serving reads, FM throughput, storage, pipeline (ratios, JSON).",
    no_args_is_help=True,
)


class Population(StrEnum):
    """Who the memory bench's traffic keeps (see bench/memory.py)."""

    open = "open"
    closed = "closed"


class Lifetimes(StrEnum):
    """The event-time lifetimes of the memory bench's workers (see bench/memory.py)."""

    default = "default"
    short = "short"


SmokeOpt = Annotated[
    bool, typer.Option("--smoke", help="Tiny run that checks plumbing; numbers are meaningless.")
]
JsonOpt = Annotated[
    Path | None,
    typer.Option("--json", help="Result file (default bench/results/<name>.json).", dir_okay=False),
]


def _one(name: str, json_path: Path | None, smoke: bool, **options: object) -> None:
    from bench.runner import report, run_bench
    from streams.settings import Settings

    result = run_bench(name, Settings(), smoke, json_path, **options)
    typer.echo(report(result))


@app.command("serve")
def serve(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """FeatureReader.lookup p50/p99/p999 vs one raw MGET (floor) and GET-per-key (naive)."""
    _one("serve", json_path, smoke)


@app.command("serve-http")
def serve_http(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """solaris serve (HTTP, binary and JSON) p50/p99 vs the in-process reader, side by side."""
    _one("serve-http", json_path, smoke)


@app.command("fm")
def fm(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """FM pairs/s: bare onnxruntime vs the engine's Embedder vs the live FM worker."""
    _one("fm", json_path, smoke)


@app.command("store")
def store(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """Redis bytes per stored pair (chosen encoding vs JSON vs options), 1 M extrapolated."""
    _one("store", json_path, smoke)


@app.command("state")
def state(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """State tier: ranker CPU to decode a stored FM user state per request, bytes per user."""
    _one("state", json_path, smoke)


@app.command("steps")
def steps(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """CPU µs per message of the speculate, verify and aggregate steps, batched vs one by one."""
    _one("steps", json_path, smoke)


@app.command("pipeline")
def pipeline(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """Sustained events/s of the live pipeline with bounded lag, and the producer's max rate."""
    _one("pipeline", json_path, smoke)


@app.command("fuse-verify")
def fuse_verify(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """CPU per event with and without the speculated hop (SOLARIS_FUSE_VERIFY), side by side."""
    _one("fuse-verify", json_path, smoke)


@app.command("scale-out")
def scale_out(json_path: JsonOpt = None, smoke: SmokeOpt = False) -> None:
    """Events/s of 1 pipeline + 1 FM worker vs 2 + 2 on 4 partitions (timed replay to lag 0)."""
    _one("scale-out", json_path, smoke)


@app.command("memory")
def memory(
    json_path: JsonOpt = None,
    smoke: SmokeOpt = False,
    population: Annotated[
        Population,
        typer.Option(
            "--population",
            help="open: every user of the traffic; closed: without the users first seen in its "
            "second half (then second-half growth is per event, not per new user).",
        ),
    ] = Population.open,
    lifetimes: Annotated[
        Lifetimes,
        typer.Option(
            "--lifetimes",
            help="short: every TTL, window and expiry grace an eighth of the replay's event "
            "time, so the second half is steady state (growth there is a leak, not state "
            "still filling up).",
        ),
    ] = Lifetimes.default,
) -> None:
    """Each worker's RSS over a 2-hour-of-event-time replay with 10x the demo's users."""
    _one("memory", json_path, smoke, population=population.value, lifetimes=lifetimes.value)


@app.command("all")
def all_(
    json_dir: Annotated[
        Path | None,
        typer.Option(
            "--json", help="Folder for <name>.json + summary.json (default bench/results)."
        ),
    ] = None,
    smoke: SmokeOpt = False,
) -> None:
    """Every benchmark, then the summary table of ratios vs targets; exit 1 if one failed."""
    from bench.common import RESULTS_DIR
    from bench.runner import run_all
    from streams.settings import Settings

    out = json_dir or RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    _, failed = run_all(Settings(), smoke, out, typer.echo)
    if failed:
        typer.echo(f"failed: {', '.join(failed)}", err=True)
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="bench")
