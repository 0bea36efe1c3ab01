"""``solaris serve``: the feature server (the reader over HTTP; see docs/feature-server.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from streams.settings import Settings


def serve(
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to listen on (default SOLARIS_BIND_HOST: loopback)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port (default SOLARIS_SERVE_PORT)."),
    ] = None,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle",
            help="Model bundle: its version gates what is served and its split FM serves the "
            "state tier (SOLARIS_STATE_TIER). Without it: no state tier, any version unless "
            "SOLARIS_SERVE_MODEL_VERSION.",
        ),
    ] = None,
) -> None:
    """Serve features over HTTP: POST /v1/features (JSON or binary), /healthz, /metrics,
    /openapi.json. Store, read deadline and limits come from the settings."""
    from streams.serve.server import ServedModel, serve_forever

    settings = Settings()
    model = None
    if bundle is not None:
        from streams.models_loader import load_models

        models, _ = load_models(settings, bundle)
        model = ServedModel(models.fm.dim, models.fm.model_version, models.state)
    serve_forever(settings, host or settings.bind_host, port or settings.serve_port, model=model)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
