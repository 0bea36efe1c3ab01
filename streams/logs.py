"""Structured logging for every SOLARIS entry point (structlog over the stdlib ``logging``).

Library modules log with ``logging.getLogger(__name__)`` and pass fields in ``extra=``; this
setup renders them as ``key=value`` pairs (or JSON with ``json=True``) on stderr.

Commands write their banners, progress and error lines with :func:`announce` / :func:`fail`: a
console line for people, or, with JSON logging on (``--log-json`` / ``SOLARIS_LOG_JSON``), a
JSON record like every other log line, so a log shipper never meets plain text (issue 25).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import MutableMapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

_STD_ATTRS = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
#: what :func:`configure_logging` was last called with (see :func:`reapply_logging`)
_current: tuple[str, bool] | None = None
#: the handler :func:`configure_logging` last installed on the root logger
_handler: logging.Handler | None = None


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
    import structlog  # here, not at import: every CLI module imports this one (fast --help)

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
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # JSON: the traceback as one "exception" string (not the exc_info tuple's reprs)
            *([structlog.processors.format_exc_info] if json else []),
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    global _current, _handler
    _current = (level, json)
    _handler = handler


def reapply_logging() -> None:
    """Install the last configuration again: Faust's worker replaces the root handlers with its
    own plain-text ones when it starts, which made every worker log line after start-up plain
    text even with ``--log-json`` (issue 25)."""
    if _current is not None:
        configure_logging(*_current)


def json_logging() -> bool:
    """Whether log lines are JSON now: :func:`configure_logging` asked for JSON and its handler
    is still the root logger's (not replaced or cleared since)."""
    return bool(_current and _current[1]) and _handler in logging.getLogger().handlers


def announce(
    message: str,
    /,
    *,
    level: int = logging.INFO,
    console: Console | None = None,
    logger: str = "solaris",
    **fields: Any,
) -> None:
    """A command's banner, progress or error line. With JSON logging on, one log record (``event``
    = ``message``, ``fields`` as keys; names of ``LogRecord`` attributes such as ``name`` or
    ``thread`` are not allowed); otherwise ``message`` printed on ``console`` (stdout by
    default) for people, red from ERROR up and yellow for WARNING, without the fields."""
    if json_logging():
        logging.getLogger(logger).log(level, message, extra=fields)
        return
    if console is None:
        from rich.console import Console

        console = Console()
    style = "red" if level >= logging.ERROR else "yellow" if level >= logging.WARNING else None
    console.print(message, style=style, markup=False, highlight=style is None, soft_wrap=True)


def fail(message: str, /, *, console: Console | None = None, **fields: Any) -> None:
    """An error line of any command (:func:`announce` at ERROR); the caller then exits."""
    announce(message, level=logging.ERROR, console=console, **fields)


def log_uncaught_exceptions() -> None:
    """Uncaught exceptions (main thread and others) as one CRITICAL record with the traceback,
    "Exception ignored in ..." as an ERROR record and Python warnings as WARNING records of
    ``py.warnings``, instead of plain text on stderr: installed by the CLI when logs are JSON."""
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    sys.unraisablehook = _log_unraisable
    logging.captureWarnings(True)


def _log_uncaught(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    logging.getLogger("solaris").critical(
        f"{exc_type.__name__}: {exc}", exc_info=(exc_type, exc, tb)
    )


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if issubclass(args.exc_type, SystemExit):
        return
    logging.getLogger("solaris").critical(
        f"{args.exc_type.__name__} in thread: {args.exc_value}",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),  # type: ignore[arg-type]
        extra={"thread_name": args.thread.name if args.thread else None},
    )


def _log_unraisable(args: Any) -> None:
    exc_type, exc = args.exc_type, args.exc_value
    where = args.err_msg or "Exception ignored in"
    logging.getLogger("solaris").error(
        f"{where}: {args.object!r}: {exc_type.__name__}: {exc}",
        exc_info=(exc_type, exc, args.exc_traceback) if exc is not None else None,
    )
