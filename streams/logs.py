"""Structured logging for every SOLARIS entry point (structlog over the stdlib ``logging``).

Library modules log with ``logging.getLogger(__name__)`` and pass fields in ``extra=``; this
setup renders them as ``key=value`` pairs (or JSON with ``json=True``) on stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_STD_ATTRS = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
#: what :func:`configure_logging` was last called with (see :func:`reapply_logging`)
_current: tuple[str, bool] | None = None


def _extra_fields(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Lift the ``extra=`` fields of a stdlib record into the structured event."""
    record = event.get("_record")
    if isinstance(record, logging.LogRecord):
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                event.setdefault(key, value)
    return event


def configure_logging(level: str = "INFO", json: bool = False) -> None:
    """Install the structured formatter on the root logger (idempotent)."""
    renderer = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            _extra_fields,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    global _current
    _current = (level, json)


def reapply_logging() -> None:
    """Install the last configuration again: Faust's worker replaces the root handlers with its
    own plain-text ones when it starts, which made every worker log line after start-up plain
    text even with ``--log-json`` (issue 25)."""
    if _current is not None:
        configure_logging(*_current)
