"""`solaris --version` prints the installed distribution's version."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from streams.cli.main import app


def test_version_flag() -> None:
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0
    assert out.stdout.strip() == f"solaris {version('solaris-recsys')}"
