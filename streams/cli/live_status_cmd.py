"""``solaris lag | coverage``: what the live pipeline is doing, read from Kafka and the
shared counters (consumer lag per partition, coverage by tier, live quality)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from streams.logs import fail
from streams.settings import Settings

console = Console()


def lag(
    group: Annotated[
        list[str] | None, typer.Option("--group", help="Group(s); default all SOLARIS groups.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the rows as JSON (for scripts).")
    ] = False,
    max_lag: Annotated[
        int | None,
        typer.Option("--max-lag", help="Exit 1 when any partition lags by more than this."),
    ] = None,
) -> None:
    """Consumer lag per group / topic / partition (committed vs end offsets)."""
    import json
    from dataclasses import asdict

    from streams.lag import LagReader

    settings = Settings()
    reader = LagReader(settings)
    try:
        rows = reader.lag(group or reader.groups())
    finally:
        reader.close()
    worst = max((r.lag for r in rows), default=0)
    if as_json:
        body = [{**asdict(r), "lag": r.lag} for r in rows]
        typer.echo(json.dumps({"max_lag": worst, "rows": body}))
    else:
        console.print(lag_table(settings, rows))
        console.print(f"max lag {worst}")
    if max_lag is not None and worst > max_lag:
        if not as_json:
            fail(f"lag {worst} exceeds --max-lag {max_lag}", console=console)
        raise typer.Exit(1)


def lag_table(settings: Settings, rows: list[Any]) -> Table:
    """Rows named relative to the topic prefix, so the table stays readable at 80 columns
    (full names share a long prefix, and narrow terminals cut them to the same text)."""
    p = settings.topic_prefix

    def short(name: str) -> str:
        for sep in (".", "-"):
            if name.startswith(p + sep):
                return name[len(p) + 1 :]
        return name

    table = Table(title=f"consumer lag (prefix {p})")
    table.add_column("group", overflow="fold")
    table.add_column("topic", overflow="fold")
    for name in ("part", "committed", "end", "lag"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(
            short(r.group),
            short(r.topic),
            str(r.partition),
            str(r.committed),
            str(r.end),
            str(r.lag),
        )
    return table


def coverage(
    watch: Annotated[float | None, typer.Option("--watch", help="Refresh every N seconds.")] = None,
    quality: Annotated[
        bool,
        typer.Option(
            "--quality/--no-quality",
            help="Also join the ranker's scores topic to impressions: live NE and transfer ratio "
            "(reads both topics and runs the FM offline; seconds per 10k impressions).",
        ),
    ] = False,
    bundle: Annotated[
        Path | None, typer.Option("--bundle", help="FM bundle for --quality (default: settings).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """The live coverage table (from the ranker's and workers' shared counters)."""
    from streams.live.report import coverage_table, live_summary

    settings = Settings()
    models = None
    if quality:
        from streams.models_loader import load_models

        models = load_models(settings, bundle)[0]
    while True:
        summary = live_summary(settings)
        if models is not None:
            from streams.live.quality import live_quality

            summary["quality"] = live_quality(settings, models.fm, vm_fair=models.vm_fair)
        if as_json:
            import json

            typer.echo(json.dumps(summary, default=float))
        else:
            console.print(coverage_table(settings, summary))
        if watch is None:
            return
        time.sleep(watch)


def register(app: typer.Typer) -> None:
    for fn in (lag, coverage):
        app.command(fn.__name__)(fn)
