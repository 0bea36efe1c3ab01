"""``python -m streams.cli`` = the ``solaris`` console script (used for child processes)."""

from streams.cli.main import app

app()
