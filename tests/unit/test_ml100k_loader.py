"""MovieLens 100K from RecBole's atomic file: columns found by header name, fetched from a wheel."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from models.data.atomic import ML100K_MEMBER, ML100K_ROWS, extract_ml100k, rating_columns
from models.data.errors import DatasetNotFound, UnknownFormat
from models.data.loaders import load_dataset, load_movielens
from streams.settings import Settings

# Columns deliberately not in MovieLens order, plus one the loader must ignore.
HEADER = "item_id:token\tlabel:float\ttimestamp:float\tuser_id:token\trating:float\n"
BODY = (
    "10\t1\t1000000100\t1\t4\n"
    "20\t0\t1000000000\t2\t3\n"
    "30\t1\t1000000000\t1\t5\n"
    "40\t1\t1000000000\t3\n"  # one field short
)


def _atomic(folder: Path, name: str = "tiny.inter") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(HEADER + BODY)
    return path


def test_columns_found_by_header_name_in_any_order(tmp_path: Path) -> None:
    log, report = load_movielens(_atomic(tmp_path))
    assert report.rows_read == 4 and report.rows_loaded == 3
    assert dict(report.skipped) == {"field_count": 1}
    assert log.user_id.tolist() == [2, 1, 1]  # sorted by time, ties in file order
    assert log.item_id.tolist() == [20, 30, 10]
    assert log.ts_ms.tolist() == [1_000_000_000_000, 1_000_000_000_000, 1_000_000_100_000]
    assert log.label.tolist() == [0, 1, 1]  # rating >= 4, not the file's own label column


def test_header_without_a_rating_field_is_an_unknown_format() -> None:
    with pytest.raises(UnknownFormat, match="rating"):
        rating_columns("user_id:token\titem_id:token\ttimestamp:float\n")


def test_found_in_an_ml_subfolder_by_dataset_name(tmp_path: Path) -> None:
    _atomic(tmp_path / "ml-100k", "ml-100k.inter")
    log, _ = load_dataset("movielens", tmp_path)
    assert len(log) == 3


def test_extract_from_a_wheel_and_a_wheel_without_the_data(tmp_path: Path) -> None:
    wheel = tmp_path / "recbole-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(ML100K_MEMBER, HEADER + BODY)
    target = extract_ml100k(wheel, tmp_path / "data")
    assert target == tmp_path / "data" / "ml-100k" / "ml-100k.inter"
    assert len(load_dataset("movielens", tmp_path / "data")[0]) == 3
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("recbole/__init__.py", "")
    with pytest.raises(DatasetNotFound, match="ml-100k"):
        extract_ml100k(empty, tmp_path / "other")


def test_real_ml100k_when_fetched() -> None:
    folder = Settings().cache_dir / "data" / "ml-100k"
    if not (folder / "ml-100k.inter").is_file():
        pytest.skip(f"MovieLens 100K not fetched to {folder} (python -m models.data.atomic DEST)")
    log, report = load_movielens(folder)
    assert report.rows_loaded == ML100K_ROWS and not report.skipped
    # the published figures of ml-100k: 943 users, 1682 movies, 55 375 ratings of 4 or 5
    assert np.unique(log.user_id).size == 943
    assert np.unique(log.item_id).size == 1682
    assert int(log.label.sum()) == 55_375
