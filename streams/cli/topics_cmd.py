"""``solaris topics create|list``: the SOLARIS topics on the configured broker."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from streams.errors import KafkaUnavailable
from streams.logs import fail
from streams.settings import Settings

app = typer.Typer(help="Create and list SOLARIS topics.")
console = Console()


@app.command()
def create() -> None:
    """Create every SOLARIS topic with the configured partitions (existing ones are kept)."""
    from streams.topics import create_topics

    settings = Settings()
    try:
        results = create_topics(settings)
    except KafkaUnavailable as exc:
        fail(str(exc), console=console)
        raise typer.Exit(1) from exc
    table = Table("topic", "partitions", "action")
    for res in results:
        table.add_row(res.name, str(res.partitions), "created" if res.created else "exists")
    console.print(table)


@app.command("list")
def list_topics(
    as_json: bool = typer.Option(False, "--json", help="Print {topic: partitions} as JSON."),
) -> None:
    """List the SOLARIS topics on the broker with their partition counts."""
    from streams.topics import admin_client

    settings = Settings()
    try:
        meta = admin_client(settings).list_topics(timeout=10)
    except Exception as exc:
        fail(f"cannot reach {settings.kafka_bootstrap}: {exc}", console=console)
        raise typer.Exit(1) from exc
    names = sorted(t for t in meta.topics if t.startswith(settings.topic_prefix + "."))
    counts = {name: len(meta.topics[name].partitions) for name in names}
    if as_json:
        import json

        typer.echo(json.dumps(counts))
        return
    table = Table("topic", "partitions")
    for name, n in counts.items():
        table.add_row(name, str(n))
    console.print(table)
