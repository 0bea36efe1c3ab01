"""A time window of a MovieLens ratings.csv (the kept-aside evaluation data of issue 22)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from models.data.errors import DatasetNotFound, UnknownFormat
from models.data.loaders import load_dataset
from models.data.window import main, write_window

ROWS = [
    "1,10,4.0,1199145599",  # 2007-12-31 23:59:59 UTC: kept by --before 2008-01-01
    "1,11,3.0,1199145600",  # 2008-01-01 00:00:00: dropped
    "2,12,5.0,946684800",  # 2000-01-01: kept, before --after 2001 dropped
    "3,13,1.0,1300000000",
]


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + "\n".join(ROWS) + "\n")
    return src


def test_window_keeps_rows_in_the_half_open_range_and_loads(tmp_path: Path) -> None:
    dest = tmp_path / "early"
    assert write_window(_src(tmp_path), dest, before=date(2008, 1, 1)) == 2
    lines = (dest / "ratings.csv").read_text().splitlines()
    assert lines == ["userId,movieId,rating,timestamp", ROWS[0], ROWS[2]]
    _interactions, report = load_dataset("movielens", dest)
    assert report.rows_loaded == 2
    assert write_window(_src(tmp_path), tmp_path / "mid", date(2001, 1, 1), date(2008, 1, 1)) == 1


def test_window_cli_and_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(_src(tmp_path)), str(tmp_path / "w"), "--after", "2007-06-01"])
    assert "3 ratings" in capsys.readouterr().out
    with pytest.raises(DatasetNotFound):
        write_window(tmp_path / "nowhere", tmp_path / "x")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "ratings.csv").write_text("a,b,c,d\n1,2,3,4\n")
    with pytest.raises(UnknownFormat):
        write_window(bad, tmp_path / "y")
