"""Entry point of the ``solaris`` console script.

Sub-commands live in one module each and import heavy dependencies (torch, faust) lazily, so
``solaris --help`` stays fast and the serving install works without torch.
"""

from __future__ import annotations

import typer

from streams.cli import (
    bench_cmd,
    cross_task_cmd,
    data_cmd,
    dead_letters_cmd,
    demo_cmd,
    exporter_cmd,
    fm_cmd,
    infra_cmd,
    live_cmd,
    live_status_cmd,
    models_cmd,
    serve_cmd,
    simulate_cmd,
    topics_cmd,
    train_cmd,
)

app = typer.Typer(
    name="solaris",
    help="SOLARIS: speculative offloading of foundation-model embeddings to real-time rankers.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(infra_cmd.app, name="infra")
app.add_typer(topics_cmd.app, name="topics")
app.add_typer(data_cmd.app, name="data")
app.add_typer(models_cmd.app, name="models")
app.add_typer(fm_cmd.app, name="fm")
train_cmd.register(app)
live_cmd.register(app)
live_status_cmd.register(app)
simulate_cmd.register(app)
demo_cmd.register(app)
bench_cmd.register(app)
exporter_cmd.register(app)
dead_letters_cmd.register(app)
cross_task_cmd.register(app)
serve_cmd.register(app)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"solaris {version('solaris-recsys')}")  # the distribution's name
        raise typer.Exit()


@app.callback()
def _main(
    log_json: bool = typer.Option(False, "--log-json", help="Logs as JSON lines (for shipping)."),
    show_version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the installed version and exit.",
    ),
) -> None:
    """Configure structured logging once for every sub-command."""
    from streams.logs import configure_logging, log_uncaught_exceptions
    from streams.settings import Settings

    settings = Settings()
    json_logs = log_json or settings.log_json
    configure_logging(settings.log_level, json=json_logs)
    if json_logs:  # after typer set its own hook (in app()), so an uncaught error is JSON too
        log_uncaught_exceptions()
