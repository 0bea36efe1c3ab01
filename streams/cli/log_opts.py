"""The ``--dataset log`` options, shared by ``data traffic``, ``train``, ``evaluate``,
``simulate`` and ``demo``, so every command reads a user's log the same way.

Imports only :mod:`models.data.log_spec` (standard library + our errors) and :mod:`streams.logs`
(structlog lazily), so ``solaris --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from models.data.errors import ConfigError
from models.data.log_spec import LogLayout, LogSpec, TimeUnit, parse_columns
from streams.logs import fail

ColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="--dataset log: column names, user=…,item=…,time=…[,label=…] (default: common "
        "names such as user_id, item_id, timestamp; no label = every row a positive).",
    ),
]
TimeUnitOpt = Annotated[
    TimeUnit,
    typer.Option("--time-unit", help="--dataset log: time column in s, ms or iso (ISO 8601)."),
]
LabelThresholdOpt = Annotated[
    float | None,
    typer.Option(
        "--label-threshold",
        help="--dataset log: label >= this is a positive (default: labels must be 0/1).",
    ),
]
LogFormatOpt = Annotated[
    LogLayout,
    typer.Option(
        "--log-format",
        help="--dataset log: file layout (auto: by name; behaviors*.tsv = MIND impressions).",
    ),
]


def log_spec_or_exit(
    dataset: str | None,
    columns: str | None,
    time_unit: TimeUnit,
    label_threshold: float | None,
    log_format: LogLayout,
    console: Console,
) -> LogSpec | None:
    """The :class:`LogSpec` for ``--dataset log`` (``None`` otherwise); exit 2 on bad options."""
    given = (
        columns is not None
        or time_unit is not TimeUnit.s
        or label_threshold is not None
        or log_format is not LogLayout.auto
    )
    if dataset != "log":
        if given:
            fail(
                "--columns/--time-unit/--label-threshold/--log-format apply to --dataset log only",
                console=console,
            )
            raise typer.Exit(2)
        return None
    try:
        return LogSpec(parse_columns(columns), time_unit, label_threshold, log_format)
    except ConfigError as exc:
        fail(str(exc), console=console)
        raise typer.Exit(2) from exc
