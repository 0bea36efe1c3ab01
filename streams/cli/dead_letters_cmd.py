"""``solaris dead-letters list|explain|replay``: read the dead-letter topic back (see
:mod:`streams.dead_letter_ops`)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from streams.errors import KafkaUnavailable
from streams.logs import announce, fail
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.dead_letter_ops import Found

app = typer.Typer(help="List, explain and replay dead letters.", no_args_is_help=True)
console = Console()

ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Only this reason.")]
SourceOpt = Annotated[
    str | None, typer.Option("--source-topic", help="Only from this topic (short or full name).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _read(from_start: bool = True) -> tuple[Settings, list[Found]]:
    from streams.dead_letter_replay import read_dead_letters

    settings = Settings()
    try:
        found, bad = read_dead_letters(settings, from_start)
    except KafkaUnavailable as exc:
        fail(str(exc), console=console)
        raise typer.Exit(1) from exc
    if bad:
        announce(
            f"{bad} messages of the dead-letter topic do not decode",
            level=logging.WARNING,
            console=console,
            undecodable=bad,
        )
    return settings, found


@app.command("list")
def list_letters(
    reason: ReasonOpt = None, source_topic: SourceOpt = None, as_json: JsonOpt = False
) -> None:
    """Every dead letter: where it came from, why, and whether it can be replayed."""
    from streams.dead_letter_ops import select

    _, found = _read()
    rows = [
        {
            "dead_letter_partition": f.partition,
            "dead_letter_offset": f.offset,
            "source": f"{f.letter.source_topic}[{f.letter.partition}]@{f.letter.offset}",
            "reason": f.letter.reason,
            "error": f.letter.error,
            "raw_bytes": len(f.letter.raw_value or b""),
            "replayable": f.replayable,
            "failed_at_ms": f.letter.failed_at_ms,
        }
        for f in select(found, reason, source_topic)
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = Table("at", "source", "reason", "bytes", "replayable", "error")
    for r in rows:
        at = f"{r['dead_letter_partition']}@{r['dead_letter_offset']}"
        table.add_row(at, str(r["source"]), str(r["reason"]), str(r["raw_bytes"]),
                      "yes" if r["replayable"] else "no", str(r["error"])[:80])  # fmt: skip
    console.print(table)


@app.command()
def explain(as_json: JsonOpt = False) -> None:
    """Dead letters counted by source topic and reason, with what each reason means."""
    from streams.dead_letter_ops import explain as explain_rows

    _, found = _read()
    rows = explain_rows(found)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = Table("source topic", "reason", "count", "meaning", "example error")
    for r in rows:
        table.add_row(str(r["source_topic"]), str(r["reason"]), str(r["count"]),
                      str(r["meaning"]), str(r["example_error"])[:80])  # fmt: skip
    console.print(table)


@app.command()
def replay(
    reason: ReasonOpt = None,
    source_topic: SourceOpt = None,
    from_start: Annotated[
        bool, typer.Option("--from-start", help="Also dead letters an earlier replay read.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be sent.")] = False,
    max_attempts: Annotated[
        int,
        typer.Option(
            min=1, help="Park a message dead-lettered this many times (first failure included)."
        ),
    ] = 3,
    rate: Annotated[
        float, typer.Option(min=0.0, help="Messages sent per second (0: as fast as possible).")
    ] = 20.0,
) -> None:
    """Send the selected dead letters' raw messages back to their source topics.

    Each replay continues after the dead letters the previous one read (all of them, selected
    or not); --from-start reads them all again. Values that were cut to a prefix, and sources
    outside this deployment's topics, are never sent. A message is sent once however many
    dead letters it left; one that has failed --max-attempts times (counted over the whole
    dead-letter topic) is parked: listed, not sent. Sends are paced (--rate), so replayed
    messages reach the agents among live traffic rather than as a batch of their own.
    """
    from streams.dead_letter_ops import replay_plan, select
    from streams.dead_letter_replay import mark_replayed, send_back

    settings, found = _read(from_start)
    history = found if from_start else _read(True)[1]
    plan = replay_plan(select(found, reason, source_topic), settings, history, max_attempts)
    summary: dict[str, object] = {
        "read": len(found),
        "selected": len(plan.send) + len(plan.refused) + len(plan.parked) + plan.duplicates,
        "sent": 0,
        "refused": len(plan.refused),
        "parked": len(plan.parked),
        "duplicates": plan.duplicates,
        "dry_run": dry_run,
    }
    if plan.parked:
        announce(
            f"{len(plan.parked)} messages failed {max_attempts} times or more: parked, not "
            "replayed (`solaris dead-letters list` shows them)",
            level=logging.WARNING,
            console=console,
            parked=len(plan.parked),
        )
    if not dry_run:
        try:
            summary["sent"] = send_back(settings, plan.send, rate)
        except KafkaUnavailable as exc:
            fail(str(exc), console=console)
            raise typer.Exit(1) from exc
        mark_replayed(settings, found)
    else:
        summary["would_send"] = len(plan.send)
    typer.echo(json.dumps(summary))


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="dead-letters")
