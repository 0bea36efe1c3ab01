"""Bring your own log: CSV/TSV/Parquet interaction logs and MIND impression logs → traffic.

Every test writes its own small file, loads it, and checks the values that come out (ids, event
times, labels), then the converted traffic (request users, times, impressions and labels), with
one malformed row per kind counted under its reason.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from models.data.columns import Impressions, Requests
from models.data.convert import ConvertConfig, convert
from models.data.errors import ConfigError, DatasetNotFound, UnknownFormat
from models.data.log_spec import LogLayout, LogSpec, NoUsableRows, TimeUnit, parse_columns
from models.data.traffic import load_traffic
from models.data.user_log import detect_layout, load_source, load_user_log
from streams.cli import data_cmd

T0 = 1_600_000_000  # 2020-09-13T12:26:40Z, in seconds
CFG = ConvertConfig(session_gap_s=60.0, k=6, seed=3)


def _ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso).timestamp() * 1000)


def _by_request(requests: Requests, impressions: Impressions) -> list[tuple[int, int, dict]]:
    """(user, time ms, {item: label}) per request, in request order."""
    out = []
    for r in range(len(requests)):
        mask = impressions.request_index == r
        labels = dict(
            zip(impressions.item_id[mask].tolist(), impressions.label[mask].tolist(), strict=True)
        )
        out.append((int(requests.user_id[r]), int(requests.event_time_ms[r]), labels))
    return out


def _rows(log) -> list[tuple[int, int, int, int]]:
    i = log.interactions
    return list(
        zip(i.user_id.tolist(), i.item_id.tolist(), i.ts_ms.tolist(), i.label.tolist(), strict=True)
    )


# --- CSV with ratings (explicit labels, threshold) ---------------------------------------------

RATINGS_CSV = (
    "uid,sku,stars,ts\n"
    f"10,100,5,{T0}\n"
    f"10,101,3,{T0 + 10}\n"
    f"20,100,4.5,{T0 + 5}\n"
    f"30,100,4,{T0 + 100}\n"  # exactly at the threshold: a positive
    f"20,,4,{T0}\n"  # missing item
    f"20,102,abc,{T0}\n"  # bad label
    "20,102,4,yesterday\n"  # bad time
    f"20,102,4,{T0},extra\n"  # field count
)
RATINGS_SPEC = LogSpec(parse_columns("user=uid,item=sku,time=ts,label=stars"), TimeUnit.s, 4.0)


def test_csv_with_ratings_values_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text(RATINGS_CSV)
    log = load_user_log(path, RATINGS_SPEC)
    ms = T0 * 1000
    assert _rows(log) == [
        (10, 100, ms, 1),
        (20, 100, ms + 5000, 1),
        (10, 101, ms + 10_000, 0),
        (30, 100, ms + 100_000, 1),
    ]
    assert log.id_encoding == {"user": "native", "item": "native"}
    assert log.report.rows_read == 8 and log.report.rows_loaded == 4
    assert dict(log.report.skipped) == {
        "missing_field": 1,
        "bad_label": 1,
        "bad_time": 1,
        "field_count": 1,
    }
    requests, impressions = convert(log.interactions, CFG, dataset="log")
    assert _by_request(requests, impressions) == [
        (10, ms, {100: 1, 101: 0}),  # 101 is 10 s later: same 60 s request
        (20, ms + 5000, {100: 1}),
        (30, ms + 100_000, {100: 1}),
    ]
    assert requests.request_id.tolist() == ["log-10-0", "log-20-0", "log-30-0"]
    for r in range(len(requests)):  # the interacted items are among the request's candidates
        cands = set(requests.candidates_of(r).tolist())
        assert set(impressions.item_id[impressions.request_index == r].tolist()) <= cands


def test_explicit_labels_without_threshold_must_be_flags(tmp_path: Path) -> None:
    path = tmp_path / "clicks.csv"
    path.write_text(f"user,item,time,clicked\n1,2,{T0},1\n1,3,{T0 + 1},0\n1,4,{T0 + 2},0.5\n")
    log = load_user_log(path, LogSpec(parse_columns("label=clicked")))
    assert [row[3] for row in _rows(log)] == [1, 0]
    assert dict(log.report.skipped) == {"bad_label": 1}


# --- TSV session log without ratings (implicit), ISO times, text ids ----------------------------

SESSION_TSV = (
    "session\tuser_id\titem_id\tevent_time\n"
    "s1\tu-b\tsku-9\t2020-09-13T12:26:40Z\n"
    "s1\tu-b\tsku-1\t2020-09-13T14:27:10+02:00\n"  # = 12:27:10Z, 30 s later
    "s2\tu-a\tsku-9\t2020-09-13T12:30:00\n"  # no zone: UTC
    "s3\tu-a\t2020-09-13T12:31:00\n"  # a field missing: field count
    "s3\tu-a\tsku-2\t13/09/2020 12:31\n"  # not ISO 8601
)


def test_tsv_session_log_without_ratings(tmp_path: Path) -> None:
    path = tmp_path / "sessions.tsv"
    path.write_text(SESSION_TSV)
    log = load_user_log(path, LogSpec(time_unit=TimeUnit.iso))
    t0 = _ms("2020-09-13T12:26:40+00:00")
    # text ids are numbered in sorted order: u-a 0, u-b 1; sku-1 0, sku-9 1
    assert _rows(log) == [(1, 1, t0, 1), (1, 0, t0 + 30_000, 1), (0, 1, t0 + 200_000, 1)]
    assert log.id_encoding == {"user": "dense", "item": "dense"}
    assert dict(log.report.skipped) == {"field_count": 1, "bad_time": 1}
    requests, impressions = convert(log.interactions, CFG, dataset="log")
    assert _by_request(requests, impressions) == [
        (1, t0, {1: 1, 0: 1}),
        (0, t0 + 200_000, {1: 1}),
    ]
    assert set(impressions.label.tolist()) == {1}  # implicit: every row a positive


# --- Parquet --------------------------------------------------------------------------------------


def test_parquet_log(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (pip install pyarrow)")
    pq = pytest.importorskip("pyarrow.parquet", reason="Parquet needs pyarrow")
    ms = T0 * 1000
    table = pa.table(
        {
            "customer": [7, 7, 8, 8, 9],
            "product": ["p2", "p1", "p1", None, "p3"],  # a null item: missing field
            "at_ms": [ms + 2_000, ms, ms + 500, ms, ms],
            "bought": [1, 0, 1, 1, 2],  # 2 is not a 0/1 flag: bad label
        }
    )
    path = tmp_path / "events.parquet"
    pq.write_table(table, path)
    spec = LogSpec(parse_columns("user=customer,item=product,time=at_ms,label=bought"), TimeUnit.ms)
    log = load_user_log(path, spec)
    assert log.layout == "parquet"
    # users are integers (kept); items are text: p1 -> 0, p2 -> 1
    assert _rows(log) == [(7, 0, ms, 0), (8, 0, ms + 500, 1), (7, 1, ms + 2_000, 1)]
    assert dict(log.report.skipped) == {"missing_field": 1, "bad_label": 1}
    requests, impressions = convert(log.interactions, CFG, dataset="log")
    assert _by_request(requests, impressions) == [(7, ms, {0: 0, 1: 1}), (8, ms + 500, {0: 1})]


def test_parquet_timestamp_column_and_missing_column(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (pip install pyarrow)")
    pq = pytest.importorskip("pyarrow.parquet", reason="Parquet needs pyarrow")
    when = datetime(2021, 3, 4, 5, 6, 7, tzinfo=UTC)
    path = tmp_path / "ts.pq"
    pq.write_table(pa.table({"user_id": [1], "item_id": [2], "timestamp": [when]}), path)
    log = load_user_log(path)
    assert _rows(log) == [(1, 2, round(when.timestamp() * 1000), 1)]
    with pytest.raises(UnknownFormat, match=r"item=sku.*user_id, item_id, timestamp"):
        load_user_log(path, LogSpec(parse_columns("item=sku")))


# --- MIND behaviors.tsv ---------------------------------------------------------------------------

BEHAVIORS = (
    "1\tU2\t11/15/2019 8:55:22 AM\tN1 N2\tN10-1 N11-0 N12-0\n"
    "2\tU1\t11/15/2019 10:00:00 PM\t\tN11-1 N10-0\n"
    "3\tU1\t11/15/2019 10:05:00 PM\tN1\tN10-1 N13\n"  # a token without label
    "4\tU3\tFriday\t\tN10-1\n"  # bad time
    "5\tU3\t11/15/2019 10:05:00 PM\n"  # field count
    "6\t\t11/15/2019 10:05:00 PM\t\tN10-1\n"  # missing user
)


def test_mind_behaviors(tmp_path: Path) -> None:
    path = tmp_path / "behaviors.tsv"
    path.write_text(BEHAVIORS)
    assert detect_layout(path) is LogLayout.mind
    log = load_user_log(tmp_path)  # the folder: its behaviors.tsv is found
    first, second = _ms("2019-11-15T08:55:22+00:00"), _ms("2019-11-15T22:00:00+00:00")
    # users: U1 0, U2 1; items: N10 0, N11 1, N12 2 (sorted text); the history is not used
    assert _rows(log) == [
        (1, 0, first, 1),
        (1, 1, first, 0),
        (1, 2, first, 0),
        (0, 1, second, 1),
        (0, 0, second, 0),
    ]
    assert log.report.rows_read == 6 and log.report.rows_loaded == 2
    assert dict(log.report.skipped) == {
        "bad_label": 1,
        "bad_time": 1,
        "field_count": 1,
        "missing_field": 1,
    }
    requests, impressions = convert(log.interactions, CFG, dataset="log")
    assert _by_request(requests, impressions) == [
        (1, first, {0: 1, 1: 0, 2: 0}),
        (0, second, {1: 1, 0: 0}),
    ]


# --- errors and the CLI -------------------------------------------------------------------------


def test_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(f"uid,sku,ts\nx,1,never\n,2,{T0}\n")
    with pytest.raises(UnknownFormat, match=r"item \(none of .*The file has: uid, sku, ts"):
        load_user_log(path)
    with pytest.raises(
        NoUsableRows, match=r"no usable rows out of 2 .*bad_time=1.*missing_field=1"
    ):
        load_user_log(path, LogSpec(parse_columns("user=uid,item=sku,time=ts")))
    with pytest.raises(ConfigError, match="KEY=COLUMN"):
        parse_columns("user:uid")
    with pytest.raises(ConfigError, match="needs a label column"):
        LogSpec(label_threshold=3.0)
    with pytest.raises(DatasetNotFound, match="exactly one log file"):
        (tmp_path / "other.tsv").write_text("")
        load_user_log(tmp_path)


def test_load_source_log_metadata(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text(RATINGS_CSV)
    interactions, meta = load_source("log", path, RATINGS_SPEC)
    assert len(interactions) == 4
    assert meta["rows_read"] == 8 and meta["rows_loaded"] == 4
    assert sum(meta["rows_skipped"].values()) == 4


def test_cli_data_traffic_log(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text(RATINGS_CSV)
    out, report = tmp_path / "t.avro", tmp_path / "t.json"
    args = ["traffic", "--dataset", "log", "--data-dir", str(path), "--out", str(out)]
    args += ["--columns", "user=uid,item=sku,time=ts,label=stars", "--label-threshold", "4"]
    result = CliRunner().invoke(data_cmd.app, [*args, "--k", "6", "--json", str(report)])
    assert result.exit_code == 0, result.output
    assert "read 8 rows, loaded 4, skipped 4 bad" in " ".join(result.output.split())
    loaded = load_traffic(out)
    assert loaded.requests.user_id.tolist() == [10, 20, 30]
    assert loaded.requests.event_time_ms.tolist() == [
        T0 * 1000,
        T0 * 1000 + 5000,
        T0 * 1000 + 100_000,
    ]
    assert sorted(loaded.impressions.label.tolist()) == [0, 1, 1, 1]
    assert loaded.metadata["dataset"] == "log"
    skipped = {"missing_field": 1, "bad_label": 1, "bad_time": 1, "field_count": 1}
    assert loaded.metadata["rows_skipped"] == skipped
    written = json.loads(report.read_text())
    assert written["metadata"]["rows_skipped"] == skipped
    assert written["stats"]["requests"] == 3
    assert np.isclose(written["metadata"]["positive_share"], 3 / 4)


def test_cli_errors(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(f"uid,sku,ts\n1,2,{T0}\n")
    base = ["traffic", "--out", str(tmp_path / "t.avro"), "--data-dir", str(path)]
    runner = CliRunner()
    missing = runner.invoke(data_cmd.app, [*base, "--dataset", "log"])
    assert missing.exit_code == 1 and "column(s) not found" in " ".join(missing.output.split())
    wrong = runner.invoke(data_cmd.app, [*base, "--dataset", "movielens", "--columns", "user=u"])
    assert wrong.exit_code == 2 and "--dataset log only" in " ".join(wrong.output.split())


def test_evaluate_simulate_demo_take_dataset_log(tmp_path: Path) -> None:
    """The commands that build traffic from --dataset parse the log options and reach the loader."""
    from streams.cli.main import app

    path = tmp_path / "log.csv"
    path.write_text(f"uid,sku,ts\n1,2,{T0}\n")
    runner = CliRunner(env={"SOLARIS_CACHE_DIR": str(tmp_path / "cache")})
    for command in ("evaluate", "simulate", "train"):
        result = runner.invoke(app, [command, "--dataset", "log", "--data-dir", str(path)])
        assert result.exit_code == 1, (command, result.output)
        assert "column(s) not found: item" in " ".join(result.output.split())
    for command in ("evaluate", "simulate"):
        args = [command, "--dataset", "log", "--data-dir", str(path), "--columns", "user:uid"]
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "KEY=COLUMN" in result.output, (command, result.output)


def test_demo_takes_log_options(tmp_path: Path) -> None:
    """demo parses the log options before it starts any service: a bad spec exits 2 at once."""
    from streams.cli.main import app

    path = tmp_path / "log.csv"
    path.write_text(f"uid,sku,ts\n1,2,{T0}\n")
    args = ["demo", "--dataset", "log", "--data-dir", str(path), "--columns", "user:uid"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "KEY=COLUMN" in result.output, result.output


def test_make_traffic_for_log(tmp_path: Path) -> None:
    """What evaluate/simulate/demo train on: the log converted into the traffic cache."""
    from streams.cli.train_cmd import Dataset, _make_traffic
    from streams.settings import Settings

    path = tmp_path / "ratings.csv"
    path.write_text(RATINGS_CSV)
    made = _make_traffic(Dataset.log, path, Settings(cache_dir=tmp_path / "cache"), RATINGS_SPEC)
    assert made.name.startswith("log-") and made.parent == tmp_path / "cache" / "traffic"
    loaded = load_traffic(made)
    assert loaded.requests.user_id.tolist() == [10, 20, 30]
    assert loaded.requests.request_id.tolist() == ["log-10-0", "log-20-0", "log-30-0"]
    assert loaded.metadata["rows_loaded"] == 4
