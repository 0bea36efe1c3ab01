"""``solaris demo``: the main job end to end (what ``make demo`` runs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from models.data.log_spec import LogLayout, TimeUnit
from streams.cli.log_opts import (
    ColumnsOpt,
    LabelThresholdOpt,
    LogFormatOpt,
    TimeUnitOpt,
    log_spec_or_exit,
)
from streams.cli.train_cmd import DataDirOpt, DatasetOpt, TrafficOpt, _resolve_traffic
from streams.settings import Settings

console = Console()


def demo(
    dataset: DatasetOpt = None,
    traffic: TrafficOpt = None,
    data_dir: DataDirOpt = None,
    requests: Annotated[
        int, typer.Option("--requests", min=10, help="Replay the last N requests of the traffic.")
    ] = 600,
    speed: Annotated[
        float,
        typer.Option(
            "--speed",
            min=0,
            help="0 = lockstep (live equals the simulator); N = event-time seconds per wall second.",
        ),
    ] = 0.0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the summary here.")
    ] = None,
    compare: Annotated[
        bool,
        typer.Option("--compare/--no-compare", help="Also simulate the replayed slice offline."),
    ] = True,
    log_columns: ColumnsOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.s,
    label_threshold: LabelThresholdOpt = None,
    log_format: LogFormatOpt = LogLayout.auto,
) -> None:
    """Start Kafka + Redis, make traffic, train if needed, run workers + ranker, replay, report, stop.

    Models are trained on the whole traffic (cached); the last ``--requests`` requests are
    replayed live. In lockstep every request waits until the pipeline has drained, so the live
    coverage is what the engine achieves when the FM keeps up with users (as in real time); with
    ``--speed N`` the replay is compressed and the ranker may run ahead of the pipeline.
    """
    from models.bundle import ensure_bundle
    from models.config import TrainConfig
    from streams import infra
    from streams.demo import run_demo, slice_traffic
    from streams.live.report import coverage_table
    from streams.simulate.served_tiers import served_source

    settings = Settings()
    name = dataset.value if dataset else None
    spec = log_spec_or_exit(name, log_columns, time_unit, label_threshold, log_format, console)
    started_here: list[str] = []
    t0 = time.perf_counter()
    try:
        for service in infra.SERVICES:
            if not infra.status(service, settings).healthy:
                console.log(f"starting {service}")
                if infra.run_script(service, "start", settings, capture=True).returncode != 0:
                    console.print(
                        f"[red]{service} failed to start (see `solaris infra status`)[/red]"
                    )
                    raise typer.Exit(1)
                started_here.append(service)
        if traffic is None and dataset is None:
            from streams.cli.train_cmd import Dataset

            dataset = Dataset.synthetic
        path = _resolve_traffic(dataset, traffic, data_dir, settings, spec)
        console.log(f"traffic: {path}")
        with console.status("models (trained once per traffic, then cached)") as status:
            # One seed: the demo needs a working model, not the evaluation's error bars.
            bundle = ensure_bundle(
                path,
                TrainConfig.from_settings(settings, seeds=1),
                settings.model_dir,
                lambda msg: status.update(f"training: {msg}"),
                served_source(path, settings),
            )
        console.log(f"models: {bundle}")
        replayed = slice_traffic(
            path, requests, settings.cache_dir / "traffic" / f"{path.stem}-last{requests}.avro"
        )
        offline = None
        if compare:
            from models.data.traffic import read_traffic
            from streams.models_loader import load_models
            from streams.simulate.config import sim_config_from_settings
            from streams.simulate.run import simulate

            with console.status("offline simulation of the replayed slice"):
                models, _ = load_models(settings, bundle)
                offline = simulate(
                    lambda: read_traffic(replayed),
                    sim_config_from_settings(
                        settings,
                        models.fm.dim,
                        test_start_ms=_first_request_ms(replayed),  # NE on every impression
                        model_version=models.fm.model_version,
                    ),
                    models,
                    with_random=False,
                )
        log_dir = settings.cache_dir / "run" / "demo-logs" / time.strftime("%Y%m%d-%H%M%S")
        summary = run_demo(settings, replayed, bundle, log_dir, speed, console.log, offline)
    finally:
        for service in reversed(started_here):
            infra.run_script(service, "stop", settings, capture=True)
    summary["wall_seconds"] = time.perf_counter() - t0
    summary["traffic"] = str(replayed)
    console.print(coverage_table(settings, summary, summary["max_consumer_lag"]))
    if offline is not None:
        c = offline["cumulative"]
        console.print(
            f"offline simulator, same requests: exact {c['exact']:.3f}, +aggregate "
            f"{c['with_aggregate']:.3f}, +neighbours' item {c['with_neighbour_item']:.3f}, "
            f"+neighbours' aggregates {c['with_neighbours']:.3f}, "
            f"FM pairs/request {offline['fm_pairs_per_request']:.2f}"
        )
        if "ne" in offline:
            ne = offline["ne"]
            console.print(
                f"offline simulator, same impressions: NE vm {ne['vm']['ne']:.4f}, vm_solaris "
                f"as served {ne['vm_solaris_achieved']['ne']:.4f}, fm {ne['fm']['ne']:.4f}, "
                f"transfer ratio {offline['transfer_ratio_at_achieved']:.3f}"
            )
    console.print(f"demo ({summary['mode']}) finished in {summary['wall_seconds']:.0f} s")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(summary, indent=2, default=float))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def _first_request_ms(traffic: Path) -> int:
    from models.data.traffic import load_requests

    times = load_requests(traffic).event_time_ms
    return int(times.min()) if len(times) else 0
