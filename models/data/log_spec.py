"""How to read a user's own interaction log: layout, column names, time unit, label rule.

Pure standard library (no numpy), so the CLI can build a :class:`LogSpec` while parsing options
without slowing ``solaris --help``. The value parsers here are shared by every log layout
(:mod:`models.data.user_log`, :mod:`models.data.mind_log`); each raises :class:`BadValue` with a
reason code that the reader counts in its :class:`~models.data.loaders.LoadReport`.

Example::

    spec = LogSpec(parse_columns("user=uid,item=sku,time=ts,label=stars"), "s", 4.0)
    spec.label_of("4.5")  # -> 1
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from models.data.errors import ConfigError, DataError
from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS


class TimeUnit(StrEnum):
    """What a time value means: seconds or milliseconds since the Unix epoch, or ISO 8601 text."""

    s = "s"
    ms = "ms"
    iso = "iso"


class LogLayout(StrEnum):
    """The file's layout; ``auto`` decides from the file name (see ``user_log.detect_layout``)."""

    auto = "auto"
    csv = "csv"
    tsv = "tsv"
    parquet = "parquet"
    mind = "mind"  # MIND behaviors.tsv: impression id, user, time, history, "item-label ..."


class BadValue(Exception):
    """Internal: one field cannot be used; ``args[0]`` is the reason code counted per row."""


class NoUsableRows(DataError):
    """The log was read but not one row could become an interaction (see the skip reasons)."""


_KEYS = ("user", "item", "time", "label")
DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "user": ("user", "user_id", "userid", "uid", "visitorid", "customer_id"),
    "item": ("item", "item_id", "itemid", "iid", "movieid", "product_id", "news_id"),
    "time": ("time", "timestamp", "ts", "event_time", "datetime"),
}
"""Header names tried (case-insensitively) for a column that ``--columns`` does not name."""
# MIND writes times as "11/15/2019 8:55:22 AM" (US order, 12-hour clock, no zone: taken as UTC).
MIND_TIME_FORMAT = "%m/%d/%Y %I:%M:%S %p"


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """Column names of a tabular log; ``None`` = find by :data:`DEFAULT_COLUMNS` (label: none)."""

    user: str | None = None
    item: str | None = None
    time: str | None = None
    label: str | None = None


def parse_columns(text: str | None) -> ColumnMap:
    """``"user=uid,item=sku,time=ts[,label=rating]"`` → :class:`ColumnMap` (keys optional)."""
    if not text:
        return ColumnMap()
    names: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in _KEYS or not value:
            raise ConfigError(
                f"--columns: {part.strip()!r} is not KEY=COLUMN with KEY one of {', '.join(_KEYS)}"
            )
        if key in names:
            raise ConfigError(f"--columns: {key} given twice")
        names[key] = value
    return ColumnMap(**names)


@dataclass(frozen=True, slots=True)
class LogSpec:
    """Everything needed to read one log besides its path. Immutable, cheap to hash."""

    columns: ColumnMap = ColumnMap()
    time_unit: TimeUnit = TimeUnit.s
    label_threshold: float | None = None
    """Explicit labels: ``value >= threshold`` is a positive; ``None``: values must be 0/1."""
    layout: LogLayout = LogLayout.auto

    def __post_init__(self) -> None:
        if self.label_threshold is not None and not math.isfinite(self.label_threshold):
            raise ConfigError(f"--label-threshold must be finite, got {self.label_threshold}")
        if self.label_threshold is not None and self.columns.label is None:
            raise ConfigError("--label-threshold needs a label column (--columns ...,label=NAME)")

    def time_ms(self, value: object) -> int:
        """Event time in ms since the epoch (UTC) of one field; ``BadValue`` if unusable."""
        if isinstance(value, datetime):
            ms = _datetime_ms(value)
        elif self.time_unit is TimeUnit.iso:
            ms = _iso_ms(_text(value))
        else:
            seconds = _number(value, "bad_time")
            ms = round(seconds * 1000 if self.time_unit is TimeUnit.s else seconds)
        if not MIN_EVENT_TIME_MS <= ms < MAX_EVENT_TIME_MS:
            raise BadValue("time_out_of_range")
        return ms

    def label_of(self, value: object) -> int:
        """1/0 from an explicit label field (threshold, or a 0/1 flag); ``BadValue`` if neither."""
        number = _number(value, "bad_label")
        if self.label_threshold is not None:
            return int(number >= self.label_threshold)
        if number not in (0.0, 1.0):
            raise BadValue("bad_label")
        return int(number)


def _text(value: object) -> str:
    if value is None:
        raise BadValue("missing_field")
    text = str(value).strip()
    if not text:
        raise BadValue("missing_field")
    return text


def _number(value: object, reason: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        number = float(value)
    else:
        try:
            number = float(_text(value))
        except ValueError:
            raise BadValue(reason) from None
    if not math.isfinite(number):  # NaN is also how Parquet readers may spell "missing"
        raise BadValue("missing_field" if math.isnan(number) else reason)
    return number


def _datetime_ms(value: datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return round(aware.timestamp() * 1000)


def _iso_ms(text: str) -> int:
    try:
        return _datetime_ms(datetime.fromisoformat(text))
    except ValueError:
        raise BadValue("bad_time") from None


def mind_time_ms(text: str) -> int:
    """A MIND time ("11/15/2019 8:55:22 AM", UTC) or ISO 8601 text → ms since the epoch."""
    try:
        ms = _datetime_ms(datetime.strptime(text.strip(), MIND_TIME_FORMAT))
    except ValueError:
        ms = _iso_ms(_text(text))
    if not MIN_EVENT_TIME_MS <= ms < MAX_EVENT_TIME_MS:
        raise BadValue("time_out_of_range")
    return ms


def id_key(value: object) -> str:
    """A user/item id as text (``7`` and ``7.0`` from a Parquet float column are both "7")."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float) and math.isnan(value):
        raise BadValue("missing_field")
    return _text(value)
