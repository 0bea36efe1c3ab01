"""Loaders: three MovieLens layouts, Taobao, bad rows counted (never raised, never silent)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest

from models.data.errors import DataError, DatasetNotFound, UnknownFormat
from models.data.loaders import (
    Interactions,
    MovieLensFormat,
    load_dataset,
    load_movielens,
    load_taobao,
    resolve_data_dir,
)
from streams.settings import Settings

# (user, item, rating, timestamp): deliberately out of time order, with a tie at t=1_000_000_000.
ROWS = [(1, 10, 4.0, 1_000_000_100), (2, 20, 3.0, 1_000_000_000), (1, 30, 5.0, 1_000_000_000)]
LAYOUTS = {
    MovieLensFormat.ML_100K: ("u.data", "", "{u}\t{i}\t{r:.0f}\t{t}\n"),
    MovieLensFormat.ML_1M: ("ratings.dat", "", "{u}::{i}::{r:.0f}::{t}\n"),
    MovieLensFormat.ML_LATEST: (
        "ratings.csv",
        "userId,movieId,rating,timestamp\n",
        "{u},{i},{r},{t}\n",
    ),
}


def _write_movielens(folder: Path, fmt: MovieLensFormat, rows: list[tuple]) -> Path:
    name, header, line = LAYOUTS[fmt]
    path = folder / name
    path.write_text(header + "".join(line.format(u=u, i=i, r=r, t=t) for u, i, r, t in rows))
    return path


@pytest.mark.parametrize("fmt", list(MovieLensFormat))
def test_movielens_layouts_detected_by_name(tmp_path: Path, fmt: MovieLensFormat) -> None:
    path = _write_movielens(tmp_path, fmt, ROWS)
    log, report = load_movielens(path)
    assert report.rows_loaded == 3 and not report.skipped
    # Sorted by time, ties kept in file order (user 2's row precedes user 1's item 30).
    assert log.ts_ms.tolist() == [1_000_000_000_000, 1_000_000_000_000, 1_000_000_100_000]
    assert log.user_id.tolist() == [2, 1, 1]
    assert log.item_id.tolist() == [20, 30, 10]
    assert log.label.tolist() == [0, 1, 1]  # rating >= 4 is liked
    assert log.label.dtype == np.int8 and log.user_id.dtype == np.int64


def test_movielens_found_in_ml_subfolder_and_explicit_format(tmp_path: Path) -> None:
    (tmp_path / "ml-1m").mkdir()
    _write_movielens(tmp_path / "ml-1m", MovieLensFormat.ML_1M, ROWS)
    log, _ = load_dataset("movielens", tmp_path)
    assert len(log) == 3
    odd = tmp_path / "my_ratings.txt"
    odd.write_text("5\t6\t4\t1000000000\n")
    with pytest.raises(UnknownFormat):
        load_movielens(odd)
    log, _ = load_movielens(odd, fmt="ml-100k")
    assert log.item_id.tolist() == [6]


def test_movielens_bad_rows_are_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text(
        "userId,movieId,rating,timestamp\n"
        "1,10,4.0,1000000000\n"
        "1,11,4.0\n"  # missing field
        "x,12,4.0,1000000000\n"  # wrong type
        "1,13,abc,1000000000\n"  # wrong type (rating)
        "1,14,7.5,1000000000\n"  # rating out of range
        "-1,15,4.0,1000000000\n"  # negative id
        "1,16,4.0,12\n"  # time out of range
        "\n"  # empty line
        "2,20,2.0,1000000001\n"
        "2,21,4.0,10000"  # truncated last line (no newline, cut timestamp)
    )
    with caplog.at_level(logging.WARNING, logger="models.data.loaders"):
        log, report = load_movielens(path)
    assert len(log) == report.rows_loaded == 2
    assert dict(report.skipped) == {
        "field_count": 1,
        "bad_int": 1,
        "bad_number": 1,
        "rating_out_of_range": 1,
        "negative_id": 1,
        "time_out_of_range": 1,
        "empty_line": 1,
        "truncated_last_line": 1,
    }
    assert report.rows_read == 10 and report.rows_skipped == 8
    [record] = [r for r in caplog.records if r.name == "models.data.loaders"]
    assert record.levelno == logging.WARNING
    assert record.skipped["truncated_last_line"] == 1  # type: ignore[attr-defined]
    assert "line 11" in record.getMessage()


def test_a_valid_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "u.data"
    path.write_text("1\t2\t5\t1000000000\n3\t4\t1\t1000000001")
    log, report = load_movielens(path)
    assert len(log) == 2 and not report.skipped


def test_taobao_labels_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "UserBehavior.csv"
    path.write_text(
        "1,100,7,pv,1511658000\n"
        "1,100,7,cart,1511658005\n"
        "2,200,8,buy,1511658001\n"
        "3,300,9,fav,1511658002\n"
        "4,400,9,click,1511658003\n"  # unknown behaviour
        "5,500,cat,pv,1511658003\n"  # non-integer category
        "6,600,9,pv\n"  # missing field
        "301780,543546,4181361,pv,15"  # the real file's truncated last line
    )
    log, report = load_taobao(tmp_path)
    assert log.label.tolist() == [0, 1, 1, 1]
    assert log.ts_ms[0] == 1_511_658_000_000
    assert dict(report.skipped) == {
        "unknown_behavior": 1,
        "bad_int": 1,
        "field_count": 1,
        "truncated_last_line": 1,
    }


def test_missing_files_raise_dataset_not_found(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFound):
        load_dataset("movielens", tmp_path)
    with pytest.raises(DatasetNotFound):
        load_dataset("taobao", tmp_path)
    with pytest.raises(DatasetNotFound):
        load_dataset("netflix", tmp_path)
    with pytest.raises(DatasetNotFound):
        resolve_data_dir(tmp_path / "absent", tmp_path)
    assert resolve_data_dir(None, tmp_path) == tmp_path


def test_interactions_checks_columns() -> None:
    ok = Interactions.build(
        "x", np.array([1, 2]), np.array([3, 4]), np.array([9, 5]), np.array([0, 1])
    )
    assert ok.ts_ms.tolist() == [5, 9] and ok.user_id.tolist() == [2, 1]
    with pytest.raises(DataError):
        Interactions("x", ok.user_id, ok.item_id, ok.ts_ms[::-1].copy(), ok.label)
    with pytest.raises(DataError):
        Interactions("x", ok.user_id.astype(np.int32), ok.item_id, ok.ts_ms, ok.label)
    assert len(ok.take(ok.label == 1)) == 1


def _data_dir() -> Path:
    path = Settings().data_dir
    if not path.exists():
        pytest.skip(f"real datasets not present at {path} (see ../shared/data/README.md)")
    return path


@pytest.mark.data
def test_real_movielens() -> None:
    data_dir = _data_dir()
    started = time.perf_counter()
    log, report = load_dataset("movielens", data_dir)
    elapsed = time.perf_counter() - started
    assert len(log) == 100_836 and not report.skipped
    assert np.unique(log.user_id).shape[0] == 610
    assert 0.45 < log.label.mean() < 0.52
    assert elapsed < 3.0  # ~0.2 s here; generous for a loaded 2-core machine


@pytest.mark.data
def test_real_taobao_skips_its_truncated_last_line() -> None:
    log, report = load_dataset("taobao", _data_dir())
    assert len(log) == 96_168
    assert dict(report.skipped) == {"truncated_last_line": 1}
    assert 0.10 < log.label.mean() < 0.12
