"""Impression logs in MIND's ``behaviors.tsv`` layout: one row per request, what was shown.

A row is ``impression_id \\t user \\t time \\t history \\t impressions`` with no header, where
``impressions`` lists the items shown as ``item-label`` tokens (``N55689-1 N35729-0``: clicked /
not clicked) and ``time`` is MIND's ``11/15/2019 8:55:22 AM`` (taken as UTC) or ISO 8601.

Every shown item becomes an interaction at the row's time with its click as label, so the
leakage-free converter (:mod:`models.data.convert`) groups, retrieves and labels it exactly as it
does MovieLens and Taobao: shown-not-clicked items are real negatives here. Not used: the
impression id (the converter names requests itself) and ``history`` — clicks from before the
log with no time, which could not be placed in event time without leaking.

A row is all or nothing: one bad token (no ``-label``, a label other than 0/1, an empty item)
skips the whole row, since a request with part of its list missing would bias its labels.
"""

from __future__ import annotations

from pathlib import Path

from models.data.loaders import LoadReport
from models.data.log_rows import RawRows, UserLog, build_user_log
from models.data.log_spec import BadValue, id_key, mind_time_ms

MIND_FIELDS = 5


def parse_impressions(text: str) -> list[tuple[str, int]]:
    """``"N1-1 N2-0"`` → ``[("N1", 1), ("N2", 0)]``; ``BadValue`` on any bad token."""
    tokens = text.split()
    if not tokens:
        raise BadValue("missing_field")
    shown: list[tuple[str, int]] = []
    for token in tokens:
        item, sep, label = token.rpartition("-")
        if not sep or not item:
            raise BadValue("bad_label")
        if label not in ("0", "1"):
            raise BadValue("bad_label")
        shown.append((item, int(label)))
    return shown


def parse_behavior(line: str) -> tuple[str, int, list[tuple[str, int]]]:
    """(user, time ms, shown items with labels) of one ``behaviors.tsv`` line."""
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) != MIND_FIELDS:
        raise BadValue("field_count")
    user = id_key(parts[1])
    ts_ms = mind_time_ms(parts[2])  # an empty field is "missing_field"
    return user, ts_ms, parse_impressions(parts[4])


def load_mind(path: Path, name: str) -> UserLog:
    """Read a ``behaviors.tsv``; ``rows_loaded`` counts impression rows (requests), not items."""
    report = LoadReport(str(path))
    rows = RawRows()
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        for line_no, line in enumerate(fh, start=1):
            report.rows_read += 1
            if not line.strip():
                report.skip("empty_line", line_no, line)
                continue
            try:
                user, ts_ms, shown = parse_behavior(line)
            except BadValue as bad:
                report.skip(bad.args[0], line_no, line)
                continue
            report.rows_loaded += 1
            for item, label in shown:
                rows.add(user, item, ts_ms, label)
    return build_user_log(name, rows, report, "mind")
