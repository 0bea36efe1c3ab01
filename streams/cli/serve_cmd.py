"""``solaris serve``: the feature server (the reader over HTTP; see docs/feature-server.md)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from streams.settings import Settings

console = Console()


def serve(
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to listen on (default SOLARIS_BIND_HOST: loopback)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port (default SOLARIS_SERVE_PORT)."),
    ] = None,
) -> None:
    """Serve features over HTTP: POST /v1/features (JSON or binary), /healthz, /metrics,
    /openapi.json. Store, read deadline and limits come from the settings."""
    from streams.serve.server import serve_forever

    settings = Settings()
    serve_forever(settings, host or settings.bind_host, port or settings.serve_port, console.print)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
