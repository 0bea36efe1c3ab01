"""``solaris infra up|down|status``: the local Kafka broker and Redis."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from streams import infra
from streams.logs import fail
from streams.settings import Settings

app = typer.Typer(help="Start, stop and check the local Kafka broker and Redis (127.0.0.1).")
console = Console()


def _services(service: str | None) -> tuple[str, ...]:
    if service is None:
        return infra.SERVICES
    if service not in infra.SERVICES:
        raise typer.BadParameter(f"unknown service {service!r}; choose from {infra.SERVICES}")
    return (service,)


@app.command()
def up(service: str | None = typer.Argument(None, help="kafka or redis; default both")) -> None:
    """Start the services that are not running (idempotent)."""
    settings = Settings()
    for name in _services(service):
        if infra.run_script(name, "start", settings).returncode != 0:
            fail(f"{name} failed to start", console=console)
            raise typer.Exit(1)


@app.command()
def down(service: str | None = typer.Argument(None, help="kafka or redis; default both")) -> None:
    """Stop the services started by `infra up` (by PID)."""
    settings = Settings()
    failed = [n for n in _services(service) if infra.run_script(n, "stop", settings).returncode]
    if failed:
        fail(f"failed to stop: {', '.join(failed)}", console=console)
        raise typer.Exit(1)


@app.command()
def status(
    service: str | None = typer.Argument(None, help="kafka or redis; default both"),
    as_json: bool = typer.Option(False, "--json", help="Print the statuses as JSON."),
) -> None:
    """Show whether each service runs and answers; exit 1 unless all are healthy."""
    settings = Settings()
    results = [infra.status(name, settings) for name in _services(service)]
    if as_json:
        import json

        body = {r.name: {"healthy": r.healthy, "detail": r.detail} for r in results}
        typer.echo(json.dumps(body))
        if not all(r.healthy for r in results):
            raise typer.Exit(1)
        return
    table = Table("service", "healthy", "detail")
    for res in results:
        table.add_row(
            res.name, "[green]yes[/green]" if res.healthy else "[red]no[/red]", res.detail
        )
    console.print(table)
    if not all(r.healthy for r in results):
        raise typer.Exit(1)
