"""Long commands log their progress when the spinner cannot be seen."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console
from rich.progress import Progress

from streams.cli.progress_log import ProgressLog


def _said(console: Console, clock: list[float]) -> tuple[Progress, ProgressLog]:
    progress = Progress(console=console, transient=True)
    return progress, ProgressLog(progress, console, interval_s=30.0, clock=lambda: clock[0])


def test_off_a_terminal_progress_is_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [100.0]
    progress, said = _said(Console(file=io.StringIO(), force_terminal=False), clock)
    task = progress.add_task("start", total=None)
    caplog.set_level(logging.INFO, logger="streams.cli.progress_log")
    for step, t in enumerate([100.0, 110.0, 129.9, 130.0, 131.0, 200.0]):
        clock[0] = t
        said.update(task, f"step {step}")
    logged = [r.getMessage() for r in caplog.records]
    assert logged == ["progress: step 0", "progress: step 3", "progress: step 5"]
    assert progress.tasks[0].description == "step 5"  # the spinner got every update


def test_on_a_terminal_only_the_spinner_changes(caplog: pytest.LogCaptureFixture) -> None:
    progress, said = _said(Console(file=io.StringIO(), force_terminal=True), [0.0])
    task = progress.add_task("start", total=None)
    caplog.set_level(logging.INFO, logger="streams.cli.progress_log")
    said.update(task, "step 0")
    assert caplog.records == [] and progress.tasks[0].description == "step 0"
