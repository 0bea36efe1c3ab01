"""``solaris exporter``: consumer lag per group / topic / partition on a Prometheus endpoint."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from streams.logs import announce
from streams.settings import Settings


def exporter(
    port: Annotated[
        int | None,
        typer.Option("--port", help="Serve /metrics here (default SOLARIS_EXPORTER_PORT)."),
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval",
            min=0.05,
            help="Seconds between polls (default SOLARIS_EXPORTER_INTERVAL_S).",
        ),
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", help="Group(s) to watch; default every group of the topic prefix."),
    ] = None,
) -> None:
    """Export consumer lag (solaris_consumer_lag_messages) for Prometheus, on SOLARIS_BIND_HOST."""
    from streams.lag_exporter import LagExporter

    settings = Settings()
    exporter = LagExporter(settings, interval, group)
    exporter.start(port)
    signal.signal(signal.SIGTERM, lambda *_: exporter.request_stop())
    signal.signal(signal.SIGINT, lambda *_: exporter.request_stop())
    url = f"http://{settings.bind_host}:{port or settings.exporter_port}/metrics"
    announce(
        f"lag exporter: {url}, every {exporter.interval_s:g} s",
        url=url,
        interval_s=exporter.interval_s,
    )
    try:
        exporter.wait()
    finally:
        exporter.stop()


def register(app: typer.Typer) -> None:
    app.command("exporter")(exporter)
