"""Bring your own log: find, recognise and load any interaction or impression log a user has.

``--dataset log --data-dir F``: ``F`` is the log file, or a folder holding exactly one log
(``behaviors.tsv`` wins if present). The layout comes from :class:`LogSpec` or, with ``auto``,
from the file name: ``behaviors*.tsv`` → MIND impressions, ``*.parquet``/``*.pq`` → Parquet,
``*.tsv``/``*.tab`` → TSV, anything else → CSV.

Loading is total like :mod:`models.data.loaders` (bad rows are counted by reason, logged, and
returned in the report); it raises only when the file is missing (:class:`DatasetNotFound`),
cannot be read or lacks a named column (:class:`UnknownFormat`), or yields no usable row
(:class:`NoUsableRows`). The result goes through the same converter as MovieLens and Taobao.

Example::

    log = load_user_log(Path("events.csv"), LogSpec(parse_columns("user=uid,item=sku,time=ts")))
    requests, impressions = convert(log.interactions, ConvertConfig(), dataset="log")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.data.errors import ConfigError, DatasetNotFound
from models.data.loaders import Interactions, load_dataset
from models.data.log_rows import UserLog
from models.data.log_spec import ColumnMap, LogLayout, LogSpec
from models.data.mind_log import load_mind
from models.data.tabular_log import load_delimited, load_parquet

LOG_DATASET = "log"
"""The dataset name of a user's log: request ids are ``log-{user}-{n}``."""
_SUFFIXES: dict[str, LogLayout] = {
    ".parquet": LogLayout.parquet,
    ".pq": LogLayout.parquet,
    ".tsv": LogLayout.tsv,
    ".tab": LogLayout.tsv,
    ".csv": LogLayout.csv,
    ".txt": LogLayout.csv,
}


def detect_layout(path: Path) -> LogLayout:
    """The layout ``auto`` picks for ``path`` (by name only: nothing is read)."""
    name = path.name.lower()
    if name.startswith("behaviors") and name.endswith(".tsv"):
        return LogLayout.mind
    return _SUFFIXES.get(path.suffix.lower(), LogLayout.csv)


def find_log_file(path: Path) -> Path:
    """``path`` if it is a file; in a folder its ``behaviors.tsv`` or its only log file."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise DatasetNotFound(f"log: {path} does not exist")
    if (path / "behaviors.tsv").is_file():
        return path / "behaviors.tsv"
    logs = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _SUFFIXES)
    if len(logs) != 1:
        found = ", ".join(p.name for p in logs) or "none"
        raise DatasetNotFound(
            f"log: {path} must hold exactly one log file ({', '.join(_SUFFIXES)}), found "
            f"{found}; pass the file itself as --data-dir"
        )
    return logs[0]


def load_user_log(path: Path, spec: LogSpec | None = None, name: str = LOG_DATASET) -> UserLog:
    """Load the log at ``path`` (file or folder) as :class:`UserLog`; blocking, one pass."""
    cfg = spec or LogSpec()
    file = find_log_file(Path(path))
    layout = detect_layout(file) if cfg.layout is LogLayout.auto else cfg.layout
    if layout is LogLayout.mind:
        if cfg.columns != ColumnMap():
            raise ConfigError("--columns does not apply to a MIND behaviors.tsv (fixed layout)")
        return load_mind(file, name)
    if layout is LogLayout.parquet:
        return load_parquet(file, cfg, name)
    return load_delimited(file, cfg, "\t" if layout is LogLayout.tsv else ",", name)


def load_source(
    dataset: str, data_dir: Path, spec: LogSpec | None = None
) -> tuple[Interactions, dict[str, Any]]:
    """Any real source by name (``movielens``, ``taobao``, ``log``) + its traffic metadata.

    The metadata (source file, rows read/loaded, skipped rows by reason) goes into the traffic
    file, so a converted file always says what was dropped on the way in.
    """
    if dataset == LOG_DATASET:
        log = load_user_log(data_dir, spec)
        return log.interactions, log.metadata()
    interactions, report = load_dataset(dataset, data_dir)
    meta: dict[str, Any] = {
        "source_file": report.path,
        "rows_read": report.rows_read,
        "rows_loaded": report.rows_loaded,
        "rows_skipped": dict(report.skipped),
    }
    return interactions, meta
