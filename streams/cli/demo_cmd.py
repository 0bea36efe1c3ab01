"""``solaris demo``: the main job end to end (what ``make demo`` runs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from models.data.log_spec import LogLayout, LogSpec, TimeUnit
from streams.cli.log_opts import (
    ColumnsOpt,
    LabelThresholdOpt,
    LogFormatOpt,
    TimeUnitOpt,
    log_spec_or_exit,
)
from streams.cli.train_cmd import DataDirOpt, DatasetOpt, TrafficOpt, _resolve_traffic
from streams.logs import fail
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.app.demo_offline import MeasuredDelays

console = Console()
#: event-time seconds per wall second of the default timed replay: the pipeline holds it on this
#: 2-core machine with flat lag (docs/running.md has the measurements)
DEFAULT_SPEED = 700.0
DEFAULT_REQUESTS = 5000


RequestsOpt = Annotated[
    int, typer.Option("--requests", min=10, help="Replay the last N requests of the traffic.")
]
SpeedOpt = Annotated[
    float,
    typer.Option("--speed", min=1, help="Timed replay: event-time seconds played per wall second."),
]
LockstepOpt = Annotated[
    bool,
    typer.Option(
        "--lockstep",
        help="Drain the pipeline before each request instead of a timed replay (slow; "
        "live coverage then equals the simulator's exactly).",
    ),
]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the summary here.")]
HtmlOpt = Annotated[
    Path | None,
    typer.Option("--html", help="Write the HTML report here (default: next to --json, else out/)."),
]
KeepTopicsOpt = Annotated[
    bool,
    typer.Option(
        "--keep-topics/--no-keep-topics",
        help="Keep the run's topics, consumer groups and table state (default: deleted after).",
    ),
]
CompareOpt = Annotated[
    bool, typer.Option("--compare/--no-compare", help="Also simulate the replayed slice offline.")
]


def demo(
    dataset: DatasetOpt = None,
    traffic: TrafficOpt = None,
    data_dir: DataDirOpt = None,
    requests: RequestsOpt = DEFAULT_REQUESTS,
    speed: SpeedOpt = DEFAULT_SPEED,
    lockstep: LockstepOpt = False,
    json_path: JsonOpt = None,
    html_path: HtmlOpt = None,
    compare: CompareOpt = True,
    keep_topics: KeepTopicsOpt = False,
    log_columns: ColumnsOpt = None,
    time_unit: TimeUnitOpt = TimeUnit.s,
    label_threshold: LabelThresholdOpt = None,
    log_format: LogFormatOpt = LogLayout.auto,
) -> None:
    """Start Kafka + Redis, make traffic, train if needed, run workers + ranker, replay, report, stop.

    Models are trained on the whole traffic (cached); the last ``--requests`` requests are
    replayed live, timed (``--speed`` event-time seconds per wall second) as traffic arrives in
    production, or with ``--lockstep``. Prints the live table next to the offline simulator's
    numbers on the same requests and writes a self-contained HTML report with its plots.
    """
    from streams.app.demo import run_demo

    settings = Settings()
    name = dataset.value if dataset else None
    spec = log_spec_or_exit(name, log_columns, time_unit, label_threshold, log_format, console)
    t0 = time.perf_counter()
    started_here = _start_infra(settings)
    try:
        path = _traffic_path(dataset, traffic, data_dir, settings, spec)
        bundle = _models(path, settings)
        replayed = _slice(path, requests, settings)
        offline = _offline(settings, bundle, replayed) if compare else None
        log_dir = settings.cache_dir / "run" / "demo-logs" / time.strftime("%Y%m%d-%H%M%S")
        run_speed = 0.0 if lockstep else speed
        summary = run_demo(
            settings, replayed, bundle, log_dir, run_speed, console.log, offline, keep_topics
        )
        delays = summary.pop("request_delays", None)
        if delays is not None:
            summary["pipeline_delays_s"] = delays.summary_s()
        if compare and not lockstep:
            _offline_at_latency(settings, bundle, replayed, summary, delays)
    finally:
        _stop_infra(settings, started_here)
    summary["wall_seconds"] = time.perf_counter() - t0
    summary["traffic"] = str(replayed)
    _print_results(settings, summary)
    _write_outputs(summary, json_path, html_path, path.stem.split("-")[0])


def _start_infra(settings: Settings) -> list[str]:
    """Start Kafka and Redis where they are not running; returns what this run started."""
    from streams import infra

    started: list[str] = []
    for service in infra.SERVICES:
        if infra.status(service, settings).healthy:
            continue
        console.log(f"starting {service}")
        if infra.run_script(service, "start", settings, capture=True).returncode != 0:
            fail(f"{service} failed to start (see `solaris infra status`)", console=console)
            _stop_infra(settings, started)
            raise typer.Exit(1)
        started.append(service)
    return started


def _stop_infra(settings: Settings, started: list[str]) -> None:
    from streams import infra

    for service in reversed(started):
        infra.run_script(service, "stop", settings, capture=True)


def _traffic_path(
    dataset: Any,
    traffic: Path | None,
    data_dir: Path | None,
    settings: Settings,
    spec: LogSpec | None = None,
) -> Path:
    if traffic is None and dataset is None:
        from streams.cli.train_cmd import Dataset

        dataset = Dataset.synthetic
    path = _resolve_traffic(dataset, traffic, data_dir, settings, spec)
    console.log(f"traffic: {path}")
    return path


def _models(path: Path, settings: Settings) -> Path:
    from models.bundle import ensure_bundle
    from models.config import TrainConfig
    from streams.simulate.served_tiers import served_source

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
    return bundle


def _slice(path: Path, requests: int, settings: Settings) -> Path:
    from streams.app.demo import slice_traffic

    out = settings.cache_dir / "traffic" / f"{path.stem}-last{requests}.avro"
    return slice_traffic(path, requests, out)


def _offline(settings: Settings, bundle: Path, replayed: Path) -> dict[str, Any]:
    """The lockstep simulator on the replayed slice, configured like the live pipeline."""
    from streams.app.demo_offline import lockstep_offline

    with console.status("offline simulation of the replayed slice (cached)"):
        return lockstep_offline(settings, bundle, replayed)


def _offline_at_latency(
    settings: Settings,
    bundle: Path,
    replayed: Path,
    summary: dict[str, Any],
    delays: MeasuredDelays | None,
) -> None:
    """After a timed run: the simulator with the pipeline delays the live run had, each
    request's own as measured (the probe's median when nothing was measured)."""
    from streams.app.demo_offline import offline_at_latency

    if delays is not None and delays.embedded:
        p50 = delays.median_ms() / 1000
        with console.status(f"offline simulation at each request's live delay (p50 {p50:.0f} s)"):
            summary["offline_at_latency"] = offline_at_latency(settings, bundle, replayed, delays)
        return
    behind = summary.get("pipeline_behind_s") or {}
    if "p50" not in behind:
        return
    with console.status(f"offline simulation at the live latency ({behind['p50']:.0f} s)"):
        summary["offline_at_latency"] = offline_at_latency(
            settings, bundle, replayed, round(behind["p50"] * 1000)
        )


def _print_results(settings: Settings, summary: dict[str, Any]) -> None:
    from streams.live.report import coverage_table

    console.print(coverage_table(settings, summary, summary["max_consumer_lag"]))
    for key, name in (("offline", "lockstep"), ("offline_at_latency", "at the live latency")):
        if summary.get(key) is not None:
            _print_offline(summary, key, name)
    offline = summary.get("offline") or {}
    if "ne" in offline:
        ne = offline["ne"]
        console.print(
            f"offline simulator, same impressions: NE vm {ne['vm']['ne']:.4f}, vm_solaris "
            f"as served {ne['vm_solaris_achieved']['ne']:.4f}, fm {ne['fm']['ne']:.4f}, "
            f"transfer ratio {offline['transfer_ratio_at_achieved']:.3f}"
        )
    fair = offline.get("vs_fair_vm") or {}
    if fair.get("available"):
        from streams.live.report import fair_ratio_text

        console.print(
            f"offline simulator vs the fair VM (NE {fair['ne_vm_fair']:.4f}): FM gain "
            f"{fair['fm_gain']:+.4f} ({fair['fm_gain_is']}), transfer ratio "
            + fair_ratio_text(fair, "transfer_ratio_at_achieved")
        )
    behind = summary.get("pipeline_behind_s") or {}
    if behind:
        console.print(
            f"FM behind the replay in event time (probe): p50 {behind['p50']:,.0f} s, "
            f"p90 {behind['p90']:,.0f} s, max {behind['max']:,.0f} s"
        )
    for key, clock in (
        ("pipeline_delays_s", "ranker"),
        ("pipeline_delays_replay_clock_s", "replay"),
    ):
        for stage, d in (summary.get(key) or {}).items():
            console.print(
                f"requests' {stage} messages, event-time delay on the {clock}'s clock: "
                f"n {d['n']:,.0f}, p50 {d['p50']:,.0f} s, p90 {d['p90']:,.0f} s, "
                f"max {d['max']:,.0f} s"
            )
    replay = summary["replay"]
    console.print(
        f"demo ({summary['mode']}): {replay['requests']:,} requests replayed in "
        f"{replay['seconds']:.0f} s ({replay['rate']:,.0f} messages/s), drained in "
        f"{summary['drain_seconds']:.0f} s, max lag {summary['max_consumer_lag']:,}; "
        f"finished in {summary['wall_seconds']:.0f} s"
    )


def _print_offline(summary: dict[str, Any], key: str, name: str) -> None:
    off = summary[key]
    c, live = off["cumulative"], summary["cumulative"]
    delay = ""
    if off.get("delay_ms") is not None:
        per = "each request's own, p50 " if off.get("delays") else ""
        delay = f" ({per}{off['delay_ms'] / 1000:,.0f} s)"
    console.print(
        f"offline simulator {name}{delay}, same requests: exact {c['exact']:.3f}, "
        f"+state {c.get('with_state', c['exact']):.3f}, +aggregate {c['with_aggregate']:.3f}, +neighbours' item {c['with_neighbour_item']:.3f}, "
        f"+neighbours' aggregates {c['with_neighbours']:.3f}, "
        f"FM pairs/request {off['fm_pairs_per_request']:.2f}"
    )
    gaps = ", ".join(f"{k} {live[k] - c[k]:+.3f}" for k in c)
    console.print(f"  live - offline {name}: {gaps}")


def _write_outputs(
    summary: dict[str, Any], json_path: Path | None, html_path: Path | None, name: str
) -> None:
    """The HTML report (and a screenshot of it when Chromium is installed), then the JSON."""
    from streams.app.report_html.browser import ReportError, find_chromium, screenshot
    from streams.app.report_html.page import write_report

    if html_path is None:
        html_path = (
            json_path.with_suffix(".html") if json_path else Path("out") / f"demo-{name}.html"
        )
    report = write_report(summary, html_path)
    summary["report_html"] = str(report)
    console.print(f"report: {report}")
    browser = find_chromium()
    if browser is not None:
        try:
            shot = screenshot(browser, report, report.with_suffix(".png"), (1280, 1500))
            summary["report_screenshot"] = str(shot)
            console.print(f"report screenshot: {shot}")
        except ReportError as exc:
            console.print(f"[yellow]no screenshot: {exc}[/yellow]")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(summary, indent=2, default=float))
        console.print(f"summary: {json_path.resolve()}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
