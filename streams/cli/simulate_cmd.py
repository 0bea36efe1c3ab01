"""``solaris simulate``: the whole engine in-process over recorded traffic, with the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from models.data.log_spec import LogLayout, TimeUnit
from streams.cli.log_opts import (
    ColumnsOpt,
    LabelThresholdOpt,
    LogFormatOpt,
    TimeUnitOpt,
    log_spec_or_exit,
)
from streams.cli.progress_log import ProgressLog
from streams.cli.train_cmd import DataDirOpt, DatasetOpt, TrafficOpt, _resolve_traffic
from streams.engine.models import EngineModels
from streams.settings import Settings
from streams.simulate.config import SimConfig

console = Console()


def _bundle(traffic: Path, settings: Settings, progress: Progress, said: ProgressLog) -> Path:
    from models.bundle import ensure_bundle
    from models.config import TrainConfig
    from streams.simulate.served_tiers import served_source

    if settings.bundle_dir is not None:
        return settings.bundle_dir
    task = progress.add_task("models for this traffic (cached)", total=None)
    path = ensure_bundle(
        traffic,
        TrainConfig.from_settings(settings),
        settings.model_dir,
        lambda msg: said.update(task, msg),
        served_source(traffic, settings),
    )
    progress.remove_task(task)
    return path


JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the report here.")]
SweepOpt = Annotated[bool, typer.Option("--sweep", help="Also run the budget x TTL grid (+ PNG).")]
SweepTtlOpt = Annotated[
    list[float] | None,
    typer.Option(
        "--sweep-ttl", help="Pair TTLs of the sweep in hours (repeatable; default 1 and 4)."
    ),
]
SweepPngOpt = Annotated[
    Path | None,
    typer.Option(
        "--sweep-png",
        help="Where the sweep's coverage-vs-cost PNG goes (default: next to --json, "
        "else out/sweep-<dataset>.png).",
    ),
]
NoRandomOpt = Annotated[
    bool, typer.Option("--no-random", help="Skip the random-selection baseline.")
]


def simulate(
    traffic: TrafficOpt = None,
    dataset: DatasetOpt = None,
    data_dir: DataDirOpt = None,
    json_path: JsonOpt = None,
    sweep: SweepOpt = False,
    sweep_ttl_hours: SweepTtlOpt = None,
    sweep_png: SweepPngOpt = None,
    no_random: NoRandomOpt = False,
    log_columns: ColumnsOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.s,
    label_threshold: LabelThresholdOpt = None,
    log_format: LogFormatOpt = LogLayout.auto,
) -> None:
    """Replay traffic through speculate → verify → embed → aggregate → neighbours → rank, offline."""
    from models.data.traffic import read_traffic
    from streams.models_loader import load_models
    from streams.simulate.config import sim_config_from_settings
    from streams.simulate.report import markdown_table
    from streams.simulate.run import simulate as run_simulation

    settings = Settings()
    name = dataset.value if dataset else None
    spec = log_spec_or_exit(name, log_columns, time_unit, label_threshold, log_format, console)
    path = _resolve_traffic(dataset, traffic, data_dir, settings, spec)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        said = ProgressLog(progress, console)
        bundle = _bundle(path, settings, progress, said)
        models, _ = load_models(settings, bundle)
        from models.bundle import BundleMeta

        meta = BundleMeta.read(bundle / "meta.json")
        bounds = meta.extra.get("split_boundaries_ms")
        config = sim_config_from_settings(
            settings, models.fm.dim, int(bounds[3]) if bounds else None, models.fm.model_version
        )
        task = progress.add_task("simulating", total=None)

        def tick(name: str, n: int) -> None:
            said.update(task, f"simulating ({name}): {n:,} events")

        report: dict[str, Any] = run_simulation(
            lambda: read_traffic(path), config, models, with_random=not no_random, progress=tick
        )
        report["traffic"] = str(path)
        report["bundle"] = str(bundle)
        report["dataset"] = meta.dataset
        if sweep:
            out = sweep_png_path(sweep_png, json_path, meta.dataset)
            _sweep(report, path, config, models, sweep_ttl_hours, out, progress, said)
    console.print(Markdown(markdown_table(report)))
    if report.get("sweep_png"):
        console.print(f"sweep plot written to {report['sweep_png']}")
    elif sweep:
        console.print("[yellow]no sweep plot: matplotlib is missing (the train extra)[/yellow]")
    if json_path is not None:
        _write_report(report, json_path)


def _write_report(report: dict[str, Any], json_path: Path) -> None:
    """The report as JSON with its provenance (the commit and date the docs tables cite)."""
    from models.results import provenance

    report["provenance"] = provenance()
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2, default=float))
    console.print(f"report written to {json_path}")


def _sweep(
    report: dict[str, Any],
    path: Path,
    config: SimConfig,
    models: EngineModels,
    ttl_hours: list[float] | None,
    png_path: Path,
    progress: Progress,
    said: ProgressLog,
) -> None:
    """The budget x TTL grid into ``report["sweep"]``, its plot into ``report["sweep_png"]``."""
    from models.data.traffic import read_traffic
    from streams.simulate.sweep import TTLS_MS, plot
    from streams.simulate.sweep import sweep as run_sweep

    ttls = [round(h * 3_600_000) for h in ttl_hours] if ttl_hours else list(TTLS_MS)
    task = progress.add_task("sweep", total=None)
    if any(ttl <= 0 for ttl in ttls):
        raise typer.BadParameter("--sweep-ttl must be positive hours")
    report["sweep"] = run_sweep(
        lambda: read_traffic(path),
        config,
        models,
        ttls_ms=ttls,
        progress=lambda msg: said.update(task, f"sweep: {msg}"),
    )
    png = plot(report["sweep"], png_path, report["dataset"])
    report["sweep_png"] = str(png) if png else None


def sweep_png_path(explicit: Path | None, json_path: Path | None, dataset: str) -> Path:
    """The sweep plot's path: the one asked for, else next to the JSON report, else under out/
    (so a sweep run without ``--json`` still leaves its plot); parent folders are created."""
    if explicit is not None:
        path = explicit
    elif json_path is not None:
        path = json_path.with_suffix(".png")
    else:
        path = Path("out") / f"sweep-{dataset}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
