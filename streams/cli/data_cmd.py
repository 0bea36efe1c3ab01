"""``solaris data traffic|summary``: make recorded-traffic files and summarise them.

numpy and the data modules are imported inside the commands so ``solaris --help`` stays fast.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from models.data.log_spec import LogLayout, LogSpec, TimeUnit
from streams.cli.log_opts import (
    ColumnsOpt,
    LabelThresholdOpt,
    LogFormatOpt,
    TimeUnitOpt,
    log_spec_or_exit,
)
from streams.logs import fail
from streams.settings import Settings

if TYPE_CHECKING:  # annotations only: numpy loads lazily, inside the commands
    from models.data.columns import Impressions, Requests

app = typer.Typer(help="Recorded traffic: generate / convert it, and summarise a file.")
console = Console()


class DatasetChoice(StrEnum):
    """Where the traffic comes from."""

    synthetic = "synthetic"
    movielens = "movielens"
    taobao = "taobao"
    log = "log"  # a user's own log file: see models.data.user_log


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def _build(
    dataset: DatasetChoice,
    data_dir: Path,
    seed: int,
    session_gap_s: float,
    k: int,
    synthetic_sizes: dict[str, Any],
    progress: Progress,
    log_spec: LogSpec | None = None,
) -> tuple[Requests, Impressions, dict[str, Any]]:
    """Generate or convert the traffic in memory; returns (requests, impressions, metadata)."""
    if dataset is DatasetChoice.synthetic:
        from models.data.synthetic import SyntheticConfig, generate, synthetic_metadata

        cfg = SyntheticConfig(seed=seed, k=k, **synthetic_sizes)
        task = progress.add_task("generating synthetic traffic", total=None)
        traffic = generate(cfg)
        progress.update(task, total=1, completed=1)
        return traffic.requests, traffic.impressions, synthetic_metadata(cfg)

    from models.data.convert import config_for, conversion_metadata, convert
    from models.data.user_log import load_source

    log, source = load_source(dataset.value, data_dir, log_spec)
    ccfg = config_for(log, session_gap_s=session_gap_s, k=k, seed=seed)
    task = progress.add_task(f"converting {len(log):,} {dataset.value} interactions", total=None)

    def step(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    requests, impressions = convert(log, ccfg, dataset=dataset.value, progress=step)
    meta = conversion_metadata(log, ccfg, dataset.value)
    meta.update(source)
    return requests, impressions, meta


@app.command()
def traffic(
    dataset: Annotated[DatasetChoice, typer.Option("--dataset", help="Traffic source.")],
    out: Annotated[Path, typer.Option("--out", help="Traffic file to write (Avro, overwritten).")],
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Real datasets folder (default: settings data_dir)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Generator / retrieval seed.")] = 0,
    session_gap_s: Annotated[
        float,
        typer.Option(
            "--session-gap-s",
            min=0.0,
            help="Real data: interactions within this many seconds of a request's first one "
            "join it.",
        ),
    ] = 60.0,
    k: Annotated[int, typer.Option("--k", min=1, help="Candidates per request.")] = 50,
    users: Annotated[int | None, typer.Option("--users", min=1, help="Synthetic: users.")] = None,
    items: Annotated[int | None, typer.Option("--items", min=1, help="Synthetic: items.")] = None,
    days: Annotated[float | None, typer.Option("--days", min=0.01, help="Synthetic: days.")] = None,
    shown: Annotated[
        int | None,
        typer.Option("--shown", min=1, help="Synthetic: labelled impressions per request."),
    ] = None,
    columns: ColumnsOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.s,
    label_threshold: LabelThresholdOpt = None,
    log_format: LogFormatOpt = LogLayout.auto,
    json_path: Annotated[
        Path | None,
        typer.Option("--json", help="Also write the statistics and source metadata here."),
    ] = None,
) -> None:
    """Write recorded traffic (requests with candidates + labelled impressions) and summarise it."""
    settings = Settings()
    log_spec = log_spec_or_exit(
        dataset.value, columns, time_unit, label_threshold, log_format, console
    )
    sizes = _synthetic_sizes(dataset, users=users, items=items, days=days, shown=shown)
    started = time.perf_counter()
    requests, impressions, meta, built, summary = _build_and_write(
        dataset, data_dir, settings, seed, session_gap_s, k, sizes, log_spec, out
    )
    finished = time.perf_counter()
    _print_stats(
        dataset, seed, out, requests, impressions, summary, built - started, finished - built
    )
    _print_source(meta)
    if json_path is not None:
        from models.data.stats import traffic_stats

        _write_json(json_path, out, asdict(traffic_stats(requests, impressions)), meta)


def _synthetic_sizes(dataset: DatasetChoice, **given: int | float | None) -> dict[str, Any]:
    """The synthetic generator's size options that were given (exit 2 for other datasets)."""
    names = {"users": "n_users", "items": "n_items", "days": "days", "shown": "shown"}
    sizes = {names[k]: v for k, v in given.items() if v is not None}
    if sizes and dataset is not DatasetChoice.synthetic:
        fail("--users/--items/--days/--shown apply to --dataset synthetic only", console=console)
        raise typer.Exit(2)
    return sizes


def _build_and_write(
    dataset: DatasetChoice,
    data_dir: Path | None,
    settings: Settings,
    seed: int,
    session_gap_s: float,
    k: int,
    sizes: dict[str, Any],
    log_spec: LogSpec | None,
    out: Path,
) -> tuple[Requests, Impressions, dict[str, Any], float, Any]:
    """Build the traffic and write it; data errors end the command with a clear message."""
    from models.data.columns import iter_events
    from models.data.errors import DataError, DatasetNotFound
    from models.data.loaders import resolve_data_dir
    from models.data.traffic import write_traffic

    try:
        folder = settings.data_dir  # unused by synthetic, so it need not exist then
        if dataset is not DatasetChoice.synthetic:
            folder = resolve_data_dir(data_dir, settings.data_dir)
        with _progress() as progress:
            requests, impressions, meta = _build(
                dataset, folder, seed, session_gap_s, k, sizes, progress, log_spec
            )
            built = time.perf_counter()
            task = progress.add_task(f"writing {out}", total=len(requests) + len(impressions))
            summary = write_traffic(
                out,
                iter_events(requests, impressions),
                meta,
                progress=lambda n: progress.advance(task, n),
            )
    except DatasetNotFound as exc:
        fail(str(exc), console=console)
        raise typer.Exit(2) from exc
    except DataError as exc:
        fail(f"{type(exc).__name__}: {exc}", console=console)
        raise typer.Exit(1) from exc
    return requests, impressions, meta, built, summary


def _print_stats(
    dataset: DatasetChoice,
    seed: int,
    out: Path,
    requests: Requests,
    impressions: Impressions,
    summary: Any,
    build_s: float,
    write_s: float,
) -> None:
    from models.data.stats import stats_rows, traffic_stats

    stats = traffic_stats(requests, impressions)
    table = Table("traffic", str(out), title=f"{dataset.value} (seed {seed})")
    for name, value in stats_rows(stats):
        table.add_row(name, value)
    table.add_row("file size", f"{summary.bytes / 1e6:.1f} MB")
    table.add_row("build / write time", f"{build_s:.1f} s / {write_s:.1f} s")
    console.print(table)


def _print_source(meta: dict[str, Any]) -> None:
    """One line on what happened to the source rows (bad ones are also logged with examples)."""
    if "rows_skipped" not in meta:
        return
    skipped = meta["rows_skipped"]
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(skipped.items())) or "none"
    console.print(
        f"source {meta.get('source_file', '?')}: read {meta.get('rows_read', '?')} rows, "
        f"loaded {meta.get('rows_loaded', '?')}, skipped {sum(skipped.values())} bad ({reasons})",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if meta.get("positive_share") == 1.0:
        negatives = meta.get("converter", {}).get("implicit_negatives", 0)
        console.print(
            "[yellow]the log has no negatives (implicit feedback): each request got up to "
            f"{negatives} retrieved candidates the user did not interact with, labelled 0; a "
            "label column gives real negatives[/yellow]"
        )


def _write_json(path: Path, out: Path, stats: dict[str, Any], meta: dict[str, Any]) -> None:
    """``{"traffic", "stats", "metadata"}``: the printed table and source summary, for scripts."""
    import json
    import math

    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in stats.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traffic": str(out), "stats": clean, "metadata": meta}, indent=2))
    console.print(f"wrote {path}")


@app.command()
def summary(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="A traffic file.")],
) -> None:
    """Print the statistics and metadata of an existing traffic file."""
    import json

    from models.data.errors import DataError
    from models.data.stats import stats_rows, traffic_stats
    from models.data.traffic import load_traffic

    try:
        loaded = load_traffic(path)
    except DataError as exc:
        fail(f"{type(exc).__name__}: {exc}", console=console)
        raise typer.Exit(1) from exc
    table = Table("traffic", str(path), title=str(loaded.metadata.get("dataset", "?")))
    for name, value in stats_rows(traffic_stats(loaded.requests, loaded.impressions)):
        table.add_row(name, value)
    console.print(table)
    console.print_json(json.dumps(loaded.metadata))
