"""Loaders of the real interaction logs (MovieLens, Taobao UserBehavior) into :class:`Interactions`.

Every loader is total: a bad row (wrong field count, unparsable number, out-of-range value,
unknown behaviour, the truncated last line of a cut file) is skipped and counted under a reason
in the :class:`LoadReport`, and the counts are logged once per file with structured ``extra``.
A loader raises only when the file itself is missing (:class:`DatasetNotFound`) or its format
cannot be recognised (:class:`UnknownFormat`).

Labels are binary: MovieLens ``rating >= 4`` (liked), Taobao ``cart``/``fav``/``buy`` (engaged)
versus ``pv`` (view only).

Example::

    interactions, report = load_dataset("movielens", Path("../shared/data"))
    assert report.rows_loaded == len(interactions)
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Literal

import numpy as np

from models.data.atomic import ATOMIC_SUFFIX, MOVIELENS_COLUMNS, RatingColumns, read_header
from models.data.errors import DataError, DatasetNotFound, UnknownFormat
from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS

logger = logging.getLogger(__name__)

DatasetName = Literal["movielens", "taobao"]
LIKED_RATING = 4.0
"""MovieLens: ``rating >= LIKED_RATING`` is a positive label (the common binarisation)."""
TAOBAO_BEHAVIORS: dict[str, int] = {"pv": 0, "fav": 1, "cart": 1, "buy": 1}
"""Taobao behaviour → label: any action beyond a page view is engagement."""
_MAX_EXAMPLES = 3


class MovieLensFormat(StrEnum):
    """The three published MovieLens rating-file layouts."""

    ML_100K = "ml-100k"  # u.data: "user\titem\trating\ttimestamp", no header
    ML_1M = "ml-1m"  # ratings.dat: "UserID::MovieID::Rating::Timestamp", no header
    ML_LATEST = "ml-latest"  # ratings.csv: header "userId,movieId,rating,timestamp"


_ML_FILES: dict[str, MovieLensFormat] = {
    "ratings.csv": MovieLensFormat.ML_LATEST,
    "ratings.dat": MovieLensFormat.ML_1M,
    "u.data": MovieLensFormat.ML_100K,
}
_ML_SEPARATORS: dict[MovieLensFormat, str] = {
    MovieLensFormat.ML_100K: "\t",
    MovieLensFormat.ML_1M: "::",
    MovieLensFormat.ML_LATEST: ",",
}


@dataclass(frozen=True, slots=True, eq=False)
class Interactions:
    """A columnar interaction log, sorted by ``ts_ms`` (stable: file order within a tie).

    All arrays have shape ``[n]``: ``user_id`` int64, ``item_id`` int64, ``ts_ms`` int64 (event
    time, ms since the Unix epoch, UTC), ``label`` int8 in {0, 1}. Ids are the dataset's own.
    """

    name: str
    user_id: np.ndarray
    item_id: np.ndarray
    ts_ms: np.ndarray
    label: np.ndarray

    def __post_init__(self) -> None:
        n = self.user_id.shape[0]
        for col, dtype in (
            ("user_id", np.int64),
            ("item_id", np.int64),
            ("ts_ms", np.int64),
            ("label", np.int8),
        ):
            arr = getattr(self, col)
            if arr.dtype != dtype or arr.shape != (n,):
                raise DataError(
                    f"Interactions.{col}: need {dtype.__name__}[{n}], got "
                    f"{arr.dtype}{list(arr.shape)}"
                )
        if n > 1 and bool(np.any(np.diff(self.ts_ms) < 0)):
            raise DataError("Interactions must be sorted by ts_ms; use Interactions.build")

    @classmethod
    def build(
        cls,
        name: str,
        user_id: np.ndarray,
        item_id: np.ndarray,
        ts_ms: np.ndarray,
        label: np.ndarray,
    ) -> Interactions:
        """Cast the columns and sort them by time (stable), whatever order they come in."""
        ts = np.asarray(ts_ms, dtype=np.int64)
        order = np.argsort(ts, kind="stable")
        return cls(
            name,
            np.asarray(user_id, dtype=np.int64)[order],
            np.asarray(item_id, dtype=np.int64)[order],
            ts[order],
            np.asarray(label, dtype=np.int8)[order],
        )

    def __len__(self) -> int:
        return int(self.user_id.shape[0])

    def take(self, index: np.ndarray) -> Interactions:
        """The rows selected by a boolean mask or an increasing index array (stays sorted)."""
        return Interactions(
            self.name,
            self.user_id[index],
            self.item_id[index],
            self.ts_ms[index],
            self.label[index],
        )


@dataclass(slots=True)
class LoadReport:
    """What a loader did with each line of one file: loaded, or skipped with a reason."""

    path: str
    rows_read: int = 0
    rows_loaded: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    def skip(self, reason: str, line_no: int, text: str) -> None:
        """Count one bad line; keep the first few as examples for the log."""
        self.skipped[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < _MAX_EXAMPLES:
            shown.append(f"line {line_no}: {text.rstrip()[:120]!r}")

    def log(self) -> None:
        """Log the outcome once: INFO when clean, WARNING with reasons and examples otherwise."""
        extra = {
            "op": "dataset_loaded",
            "path": self.path,
            "rows_read": self.rows_read,
            "rows_loaded": self.rows_loaded,
            "skipped": dict(self.skipped),
        }
        if not self.skipped:
            logger.info("loaded %d rows from %s", self.rows_loaded, self.path, extra=extra)
            return
        detail = "; ".join(
            f"{reason}={count} ({', '.join(self.examples[reason])})"
            for reason, count in sorted(self.skipped.items())
        )
        logger.warning(
            "loaded %d rows from %s, skipped %d bad rows: %s",
            self.rows_loaded,
            self.path,
            self.rows_skipped,
            detail,
            extra=extra,
        )


class _BadRow(Exception):
    """Internal: one line cannot become an interaction; ``args[0]`` is the reason code."""


Row = tuple[int, int, int, int]
"""(user_id, item_id, ts_seconds, label) parsed from one line."""


def _to_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _BadRow("bad_int") from None


def _check_row(user: int, item: int, ts_s: int) -> None:
    if user < 0 or item < 0:
        raise _BadRow("negative_id")
    if not MIN_EVENT_TIME_MS <= ts_s * 1000 < MAX_EVENT_TIME_MS:
        raise _BadRow("time_out_of_range")


def _movielens_row(
    sep: str, cols: RatingColumns = MOVIELENS_COLUMNS, liked_rating: float = LIKED_RATING
) -> Callable[[str], Row]:
    def parse(line: str) -> Row:
        parts = line.rstrip("\r\n").split(sep)
        if len(parts) != cols.n_fields:
            raise _BadRow("field_count")
        user, item = _to_int(parts[cols.user]), _to_int(parts[cols.item])
        ts_s = _to_int(parts[cols.timestamp])
        try:
            rating = float(parts[cols.rating])
        except ValueError:
            raise _BadRow("bad_number") from None
        if not (math.isfinite(rating) and 0.0 <= rating <= 5.0):
            raise _BadRow("rating_out_of_range")
        _check_row(user, item, ts_s)
        return user, item, ts_s, int(rating >= liked_rating)

    return parse


def _taobao_row(behaviors: Mapping[str, int] = TAOBAO_BEHAVIORS) -> Callable[[str], Row]:
    def parse(line: str) -> Row:
        parts = line.rstrip("\r\n").split(",")
        if len(parts) != 5:
            raise _BadRow("field_count")
        user, item, ts_s = _to_int(parts[0]), _to_int(parts[1]), _to_int(parts[4])
        _to_int(parts[2])  # category id: not used, but a non-integer one marks a corrupt row
        label = behaviors.get(parts[3])
        if label is None:
            raise _BadRow("unknown_behavior")
        _check_row(user, item, ts_s)
        return user, item, ts_s, label

    return parse


def _read_rows(
    path: Path, name: str, parse: Callable[[str], Row], has_header: bool
) -> tuple[Interactions, LoadReport]:
    """Parse ``path`` line by line; bad lines are counted, never raised."""
    report = LoadReport(str(path))
    cols: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    users, items, times, labels = cols
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        for line_no, line in enumerate(fh, start=1):
            if line_no == 1 and has_header:
                continue
            report.rows_read += 1
            if not line.strip():
                report.skip("empty_line", line_no, line)
                continue
            try:
                user, item, ts_s, label = parse(line)
            except _BadRow as bad:
                # A cut file ends mid-row without a newline: name that, not its symptom.
                reason = bad.args[0] if line.endswith("\n") else "truncated_last_line"
                report.skip(reason, line_no, line)
                continue
            users.append(user)
            items.append(item)
            times.append(ts_s)
            labels.append(label)
    report.rows_loaded = len(users)
    report.log()
    interactions = Interactions.build(
        name,
        np.array(users, dtype=np.int64),
        np.array(items, dtype=np.int64),
        np.array(times, dtype=np.int64) * 1000,
        np.array(labels, dtype=np.int8),
    )
    return interactions, report


def detect_movielens_format(path: Path) -> MovieLensFormat:
    """The MovieLens layout of a ratings file, from its file name."""
    fmt = _ML_FILES.get(path.name)
    if fmt is None:
        raise UnknownFormat(
            f"{path}: not a known MovieLens ratings file ({', '.join(_ML_FILES)}); pass fmt="
        )
    return fmt


def find_movielens_file(path: Path) -> Path:
    """A ratings file: ``path`` itself, or the first known one in it or in its ``ml-*`` folders."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise DatasetNotFound(f"MovieLens: {path} does not exist")
    folders = [path, *sorted(p for p in path.iterdir() if p.is_dir() and p.name.startswith("ml-"))]
    for folder in folders:
        for filename in _ML_FILES:
            if (folder / filename).is_file():
                return folder / filename
        atomic = sorted(folder.glob(f"*{ATOMIC_SUFFIX}"))
        if atomic:
            return atomic[0]
    raise DatasetNotFound(
        f"MovieLens: no {'/'.join(_ML_FILES)} or *{ATOMIC_SUFFIX} in {path} or its ml-* folders"
    )


def load_movielens(
    path: Path, fmt: MovieLensFormat | str | None = None, liked_rating: float = LIKED_RATING
) -> tuple[Interactions, LoadReport]:
    """Load MovieLens ratings (any of the three layouts); label = ``rating >= liked_rating``.

    ``path`` is a ratings file or a folder holding one (directly or in an ``ml-*`` sub-folder).
    ``fmt`` overrides detection by file name. A RecBole atomic file (``*.inter``, see
    ``models.data.atomic``) is read by the column names of its header. ``liked_rating`` other
    than 4 defines another task on the same rows (``models.data.tasks``).
    """
    file = find_movielens_file(Path(path))
    if fmt is None and file.suffix == ATOMIC_SUFFIX:
        parse = _movielens_row("\t", read_header(file), liked_rating)
        return _read_rows(file, "movielens", parse, True)
    layout = MovieLensFormat(fmt) if fmt is not None else detect_movielens_format(file)
    has_header = layout is MovieLensFormat.ML_LATEST
    parse = _movielens_row(_ML_SEPARATORS[layout], MOVIELENS_COLUMNS, liked_rating)
    return _read_rows(file, "movielens", parse, has_header)


def find_taobao_file(path: Path) -> Path:
    """``UserBehavior.csv``: ``path`` itself, in it, or in its ``taobao-userbehavior`` folder."""
    for candidate in (
        path,
        path / "UserBehavior.csv",
        path / "taobao-userbehavior" / "UserBehavior.csv",
    ):
        if candidate.is_file():
            return candidate
    raise DatasetNotFound(f"Taobao: no UserBehavior.csv at {path}")


def load_taobao(
    path: Path, behaviors: Mapping[str, int] = TAOBAO_BEHAVIORS
) -> tuple[Interactions, LoadReport]:
    """Load Taobao UserBehavior (no header); label = ``behaviors[behaviour]`` (default:
    cart/fav/buy (1) versus pv (0); another map defines another task on the same rows)."""
    file = find_taobao_file(Path(path))
    return _read_rows(file, "taobao", _taobao_row(behaviors), has_header=False)


def load_dataset(name: DatasetName | str, data_dir: Path) -> tuple[Interactions, LoadReport]:
    """Load a real dataset by name from the shared data folder (see ``../shared/data/README``)."""
    if name == "movielens":
        return load_movielens(Path(data_dir))
    if name == "taobao":
        return load_taobao(Path(data_dir))
    raise DatasetNotFound(
        f"unknown dataset {name!r}; known: movielens, taobao "
        "(any other log: dataset 'log', models.data.user_log.load_source)"
    )


def resolve_data_dir(explicit: Path | None, default: Path) -> Path:
    """The data folder to use: ``explicit`` if given, else ``default`` (from settings).

    Raises :class:`DatasetNotFound` naming the folder when it does not exist, so a command fails
    with a clear message instead of a traceback deep in a loader.
    """
    path = Path(explicit) if explicit is not None else Path(default)
    if not path.exists():
        raise DatasetNotFound(f"data folder {path} does not exist (pass --data-dir)")
    return path
