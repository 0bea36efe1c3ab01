"""Tabular interaction logs (CSV, TSV, Parquet): one row = one (user, item, time[, label]) event.

Columns are found by header name (``--columns``, else the common names in
``log_spec.DEFAULT_COLUMNS``); a named column that the header lacks is a clear
:class:`UnknownFormat` listing the columns the file has. Every row is parsed on its own: a
missing field, an unparsable time or label, a wrong field count is counted under its reason and
skipped, never raised. Without a label column every row is a positive (implicit feedback).

Parquet needs ``pyarrow`` (imported only when a Parquet file is read).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from models.data.errors import UnknownFormat
from models.data.loaders import LoadReport
from models.data.log_rows import RawRows, UserLog, build_user_log
from models.data.log_spec import DEFAULT_COLUMNS, BadValue, LogSpec, id_key

Positions = dict[str, int]
"""Logical column ("user", "item", "time", "label") → index in a row."""


def column_positions(header: Sequence[str], spec: LogSpec, path: Path) -> Positions:
    """Index of each needed column in ``header``; ``UnknownFormat`` naming what is missing."""
    names = [str(name).strip() for name in header]
    lower = {name.lower(): i for i, name in reversed(list(enumerate(names)))}
    wanted = {
        "user": spec.columns.user,
        "item": spec.columns.item,
        "time": spec.columns.time,
        "label": spec.columns.label,
    }
    positions: Positions = {}
    missing: list[str] = []
    for key, name in wanted.items():
        if name is not None:
            if name in names:
                positions[key] = names.index(name)
            else:
                missing.append(f"{key}={name}")
        elif key != "label":  # no label column named: implicit feedback
            found = [lower[alias] for alias in DEFAULT_COLUMNS[key] if alias in lower]
            if found:
                positions[key] = found[0]
            else:
                missing.append(f"{key} (none of {', '.join(DEFAULT_COLUMNS[key])})")
    if missing:
        raise UnknownFormat(
            f"{path}: column(s) not found: {'; '.join(missing)}. The file has: "
            f"{', '.join(names) or 'no header'}. Name them with --columns user=…,item=…,time=…"
        )
    return positions


def parse_row(values: Sequence[object], pos: Positions, spec: LogSpec) -> tuple[str, str, int, int]:
    """(user, item, time ms, label) of one row; ``BadValue`` with the reason if unusable."""
    user, item = id_key(values[pos["user"]]), id_key(values[pos["item"]])
    ts_ms = spec.time_ms(values[pos["time"]])
    label = spec.label_of(values[pos["label"]]) if "label" in pos else 1
    return user, item, ts_ms, label


def _read(
    rows: Iterator[tuple[int, Sequence[object]]],
    width: int,
    pos: Positions,
    spec: LogSpec,
    report: LoadReport,
    sep: str = ",",
) -> RawRows:
    """Parse numbered rows of ``width`` fields; bad ones are counted in ``report``."""
    out = RawRows()
    for line_no, values in rows:
        report.rows_read += 1
        if not values or all(str(v).strip() == "" for v in values if v is not None):
            report.skip("empty_line", line_no, "")
            continue
        try:
            if len(values) != width:
                raise BadValue("field_count")
            out.add(*parse_row(values, pos, spec))
        except BadValue as bad:
            text = sep.join("" if v is None else str(v) for v in values)
            report.skip(bad.args[0], line_no, text)
    report.rows_loaded = len(out)
    return out


def load_delimited(path: Path, spec: LogSpec, delimiter: str, name: str) -> UserLog:
    """A CSV/TSV log with a header line (quoted fields allowed)."""
    report = LoadReport(str(path))
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        header = next(reader, [])
        pos = column_positions(header, spec, path)
        numbered = ((reader.line_num, row) for row in reader)
        rows = _read(numbered, len(header), pos, spec, report, delimiter)
    layout = "csv" if delimiter == "," else "tsv"
    return build_user_log(name, rows, report, layout)


def load_parquet(path: Path, spec: LogSpec, name: str) -> UserLog:
    """A Parquet log; only the needed columns are read. Row numbers in examples are 1-based."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UnknownFormat(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from exc
    try:
        names = list(pq.read_schema(path).names)
        pos = column_positions(names, spec, path)
        table = pq.read_table(path, columns=[names[i] for i in pos.values()])
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise UnknownFormat(f"{path}: not a readable Parquet file ({exc})") from exc
    columns = [table.column(i).to_pylist() for i in range(len(pos))]
    compact = {key: i for i, key in enumerate(pos)}
    numbered = ((n, list(values)) for n, values in enumerate(zip(*columns, strict=True), start=1))
    report = LoadReport(str(path))
    rows = _read(numbered, len(pos), compact, spec, report)
    return build_user_log(name, rows, report, "parquet")
