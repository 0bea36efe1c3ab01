"""Every CLI option and argument says what it is for (``--help`` is the reference)."""

from __future__ import annotations

from typing import Any

import typer.main

from streams.cli.main import app


def _params(command: Any, path: str) -> list[tuple[str, Any]]:
    out = [(path, p) for p in command.params]
    for name, sub in getattr(command, "commands", {}).items():
        out += _params(sub, f"{path} {name}")
    return out


def test_every_option_and_argument_has_help() -> None:
    params = _params(typer.main.get_command(app), "solaris")
    assert len(params) > 100  # the walk reached the subcommands
    missing = [
        f"{path} {'/'.join(getattr(p, 'opts', [p.name]))}"
        for path, p in params
        if p.name != "help" and not (getattr(p, "help", None) or "").strip()
    ]
    assert not missing, missing
