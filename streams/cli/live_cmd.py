"""``solaris worker | ranker | replay``: the live pipeline's commands (``lag`` and
``coverage`` watch it: :mod:`streams.cli.live_status_cmd`)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from streams.live.malloc_tuning import release_freed_memory
from streams.logs import announce, fail, json_logging
from streams.settings import Settings

console = Console()


def worker(
    agents: Annotated[
        str,
        typer.Option(
            "--agents",
            help="Comma-separated roles: history,speculate,verify,embed,aggregate,neighbours or 'all'.",
        ),
    ] = "all",
    web_port: Annotated[
        int | None, typer.Option("--web-port", help="Faust web port (default: none).")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", help="Serve Prometheus metrics here.")
    ] = None,
    bundle: Annotated[
        Path | None, typer.Option("--bundle", help="Model bundle (default: settings / newest).")
    ] = None,
) -> None:
    """Start a Faust worker of the pipeline (several may run in one consumer group)."""
    from prometheus_client import start_http_server

    from store.values import version_tag
    from streams.live import metrics
    from streams.live.app import ROLES, create_app
    from streams.live.components import Components
    from streams.models_loader import load_models
    from streams.stores import store_from_settings
    from streams.topics import create_changelog_topics, create_topics

    settings = Settings()
    roles = set(ROLES) if agents == "all" else {a.strip() for a in agents.split(",") if a.strip()}
    if "embed" in roles and len(roles) > 1 and roles != set(ROLES):
        fail("run 'embed' alone (its own group) or with every role ('all')", console=console)
        raise typer.Exit(2)
    create_topics(settings)
    _refuse_unless_copartitioned(settings)  # fail fast, before loading models
    release_freed_memory(settings.malloc_release_kib)  # before the models and tables allocate
    models, path = load_models(settings, bundle)
    store = store_from_settings(settings)
    parts = Components(settings, models, store)
    app = create_app(settings, roles, parts, web_port)
    changelogs = tuple(t.changelog_topic.get_topic_name() for t in app.tables.values())
    create_changelog_topics(settings, list(changelogs))
    _refuse_unless_copartitioned(settings, changelogs)
    if metrics_port:
        start_http_server(metrics_port, addr=settings.bind_host)
    version = models.fm.model_version
    metrics.set_model_info(
        "fm" if roles == {"embed"} else "pipeline", version, version_tag(version)
    )
    announce(
        f"worker {app.conf.id}: roles {sorted(roles)}, bundle {path.name}",
        console=console,
        app_id=app.conf.id,
        roles=sorted(roles),
        bundle=str(path),
    )
    worker_class = _faust_worker_class()
    worker_class(app, loglevel=settings.log_level.lower()).execute_from_commandline()


def _faust_worker_class() -> type:
    """Faust's worker, with SOLARIS's log format put back once Faust has set up its own (and,
    with JSON logs, quiet: every line it writes is then a log record)."""
    import faust

    from streams.logs import reapply_logging

    class Worker(faust.Worker):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # JSON logs: none of Faust's own console text (" OK ^", the spinner's escapes)
            quiet = json_logging()
            super().__init__(*args, quiet=quiet, **kwargs)
            if quiet:
                self.spinner = None

        def on_setup_root_logger(self, logger: Any, level: int) -> None:
            super().on_setup_root_logger(logger, level)
            reapply_logging()

    return Worker


def _refuse_unless_copartitioned(settings: Settings, extra: tuple[str, ...] = ()) -> None:
    """Exit 2 with the reason when the topics a worker co-reads differ in partition count."""
    from streams.errors import TopicLayoutError
    from streams.topics import check_copartitioned

    try:
        check_copartitioned(settings, extra)
    except TopicLayoutError as exc:
        fail(str(exc), console=console)
        raise typer.Exit(2) from exc


def ranker(
    group: Annotated[
        str | None, typer.Option("--group", help="Consumer group (default <prefix>-ranker).")
    ] = None,
    no_scores: Annotated[
        bool, typer.Option("--no-scores", help="Do not write the scores topic.")
    ] = False,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", help="Serve Prometheus metrics here.")
    ] = None,
    exit_when_idle: Annotated[
        float | None, typer.Option("--exit-when-idle", help="Stop after this many idle seconds.")
    ] = None,
    bundle: Annotated[
        Path | None, typer.Option("--bundle", help="Model bundle (default: settings / newest).")
    ] = None,
    health_port: Annotated[
        int | None,
        typer.Option("--health-port", help="Serve /healthz and /readyz here (SOLARIS_BIND_HOST)."),
    ] = None,
) -> None:
    """Run the ranker service: tiered lookups + vm_solaris per request, coverage measured live."""
    from prometheus_client import start_http_server

    from store.reader import FeatureReader
    from streams.engine.config import reader_config
    from streams.live.ranker_service import RankerOptions, RankerService
    from streams.models_loader import load_models
    from streams.stores import store_from_settings

    settings = Settings()
    models, _ = load_models(settings, bundle)
    store = store_from_settings(settings)
    reader = FeatureReader(
        store,
        reader_config(settings, models.fm.dim, models.fm.model_version),
        states=models.state,
    )
    options = RankerOptions(
        group or f"{settings.topic_prefix}-ranker", not no_scores, exit_when_idle_s=exit_when_idle
    )
    service = RankerService(settings, reader, models.solaris, models.items, options, models.vm)
    if metrics_port:
        start_http_server(metrics_port, addr=settings.bind_host)
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    signal.signal(signal.SIGINT, lambda *_: service.stop())
    health = None
    if health_port:
        from streams.live.health import HealthServer

        health = HealthServer(settings.bind_host, health_port, service.readiness).start()
    announce(f"ranker: group {options.group_id}", console=console, group=options.group_id)
    try:
        service.run()
    finally:
        if health is not None:
            health.stop()
    _announce_ranked(service.requests, service.coverage.cumulative())


def _announce_ranked(requests: int, coverage: dict[str, float]) -> None:
    announce(
        f"ranker: {requests} requests ranked, coverage {coverage}",
        console=console,
        requests=requests,
        coverage=coverage,
    )


def _parse_time(text: str) -> int:
    """Epoch ms, or an ISO-8601 time (UTC when no zone is given)."""
    from datetime import UTC, datetime

    if text.isdigit():
        return int(text)
    dt = datetime.fromisoformat(text)
    return int((dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp() * 1000)


def _replay_range(
    settings: Settings,
    progress: Progress,
    from_topic: str,
    start: str | None,
    end: str | None,
    to_topic: str | None,
) -> Any:
    from streams.replay import replay_topic_range

    if not (start and end and to_topic):
        fail("--from-topic needs --start, --end and --to-topic", console=console)
        raise typer.Exit(2)
    task = progress.add_task(f"re-playing {from_topic}", total=None)
    return replay_topic_range(
        settings,
        from_topic,
        _parse_time(start),
        _parse_time(end),
        to_topic,
        lambda n: progress.update(task, completed=n),
    )


def _replay_file(
    settings: Settings, progress: Progress, file: Path, speed: float, lockstep: bool
) -> Any:
    from models.data.traffic import traffic_metadata
    from streams.replay import replay_file

    total = traffic_metadata(file).get("events")
    rate = "max" if speed == 0 else f"{speed:g}x"
    task = progress.add_task(f"replaying {file.name} at {rate}", total=total)
    lock = _lockstep(settings) if lockstep else None
    return replay_file(settings, file, speed, lock, lambda n: progress.update(task, completed=n))


def replay(
    file: Annotated[
        Path | None, typer.Argument(help="Recorded-traffic file.", exists=True, dir_okay=False)
    ] = None,
    speed: Annotated[
        float,
        typer.Option(
            "--speed", min=0, help="Event-time seconds per wall second; 0 = as fast as possible."
        ),
    ] = 0.0,
    lockstep: Annotated[
        bool,
        typer.Option(
            "--lockstep", help="Wait for the pipeline to drain before each request (parity runs)."
        ),
    ] = False,
    from_topic: Annotated[
        str | None,
        typer.Option("--from-topic", help="Re-play this topic's --start..--end range instead."),
    ] = None,
    start: Annotated[
        str | None, typer.Option("--start", help="Range start: epoch ms or ISO time.")
    ] = None,
    end: Annotated[str | None, typer.Option("--end", help="Range end (exclusive).")] = None,
    to_topic: Annotated[
        str | None,
        typer.Option("--to-topic", help="Topic the re-played range is written to (keeps times)."),
    ] = None,
) -> None:
    """Produce recorded traffic to Kafka (timestamps = event time), or re-play a topic's time range."""
    settings = Settings()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=json_logging()) as progress:
        if from_topic is not None:
            stats = _replay_range(settings, progress, from_topic, start, end, to_topic)
        elif file is not None:
            stats = _replay_file(settings, progress, file, speed, lockstep)
        else:
            fail("give a traffic FILE or --from-topic", console=console)
            raise typer.Exit(2)
    announce(
        f"replayed {stats.messages} messages ({stats.requests} requests, {stats.impressions} "
        f"impressions) in {stats.seconds:.1f} s: {stats.rate:,.0f} msg/s",
        console=console,
        messages=stats.messages,
        requests=stats.requests,
        impressions=stats.impressions,
        seconds=round(stats.seconds, 3),
    )


def _lockstep(settings: Settings):
    from streams.lag import LagReader

    reader = LagReader(settings)
    topics = [
        settings.topic(t)
        for t in ("requests", "impressions", "speculated", "verified", "embeddings")
    ]

    def wait() -> None:
        groups = reader.groups()
        if not reader.wait_drained(groups, topics, timeout_s=120):
            raise typer.Exit(1)

    return wait


def register(app: typer.Typer) -> None:
    for fn in (worker, ranker, replay):
        app.command(fn.__name__)(fn)
