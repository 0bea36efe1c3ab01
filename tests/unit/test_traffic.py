"""Recorded-traffic files: round trip, ordering rules, metadata, determinism, corrupt input, CLI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import fastavro
import numpy as np
import pytest
from typer.testing import CliRunner

from models.data.columns import Impressions, Requests, iter_events
from models.data.errors import DataError, TrafficFormatError
from models.data.stats import traffic_stats
from models.data.synthetic import SyntheticConfig, generate, synthetic_metadata
from models.data.traffic import (
    FORMAT_VERSION,
    load_impressions,
    load_requests,
    load_traffic,
    read_traffic,
    traffic_metadata,
    write_traffic,
)
from schemas.records import ImpressionEvent, RequestEvent
from streams.cli import data_cmd

T0 = 1_700_000_000_000
SMALL = SyntheticConfig(
    seed=3, n_users=60, n_items=400, days=2.0, k=20, shown=3, sessions_per_day=0.35
)


@pytest.fixture(scope="module")
def small() -> tuple[Requests, Impressions]:
    traffic = generate(SMALL)
    return traffic.requests, traffic.impressions


def _events() -> list[RequestEvent | ImpressionEvent]:
    return [
        RequestEvent("r1", 7, T0, "feed", (1, 2, 3)),
        ImpressionEvent("r1", 7, 2, T0, 1, 1),
        RequestEvent("r2", 8, T0, "feed", (4,)),  # same millisecond: allowed, request first
        ImpressionEvent("r2", 8, 4, T0, 0, 0),
        RequestEvent("r3", 7, T0 + 5, "feed", ()),
    ]


def test_round_trip_events_and_columns(tmp_path: Path, small: tuple[Requests, Impressions]) -> None:
    requests, impressions = small
    path = tmp_path / "t.avro"
    summary = write_traffic(path, iter_events(requests, impressions), synthetic_metadata(SMALL))
    assert (summary.requests, summary.impressions) == (len(requests), len(impressions))
    assert summary.users == np.unique(requests.user_id).shape[0]
    assert list(read_traffic(path)) == list(iter_events(requests, impressions))
    loaded = load_traffic(path)
    for name in ("request_id", "user_id", "event_time_ms", "cand_offsets", "candidates"):
        assert np.array_equal(getattr(loaded.requests, name), getattr(requests, name)), name
    for name in (
        "request_index",
        "request_id",
        "user_id",
        "item_id",
        "event_time_ms",
        "position",
        "label",
    ):
        assert np.array_equal(getattr(loaded.impressions, name), getattr(impressions, name))
    assert len(load_requests(path)) == len(requests)
    assert len(load_impressions(path)) == len(impressions)
    meta = traffic_metadata(path)
    assert meta["format_version"] == FORMAT_VERSION and meta["dataset"] == "synthetic"
    assert meta["seed"] == 3 and meta["generator"]["n_users"] == 60


def test_file_order_is_event_time_with_requests_first(
    tmp_path: Path, small: tuple[Requests, Impressions]
) -> None:
    path = tmp_path / "t.avro"
    write_traffic(path, iter_events(*small), {"dataset": "x"})
    seen: dict[str, int] = {}
    last = 0
    for event in read_traffic(path):
        assert event.event_time_ms >= last
        last = event.event_time_ms
        if isinstance(event, RequestEvent):
            seen[event.request_id] = event.event_time_ms
        else:
            assert seen[event.request_id] == event.event_time_ms  # request precedes, same time


def test_plain_avro_readers_see_the_embedded_schema(tmp_path: Path) -> None:
    path = tmp_path / "t.avro"
    write_traffic(path, _events(), {"dataset": "hand"})
    with path.open("rb") as fh:
        reader = fastavro.reader(fh)
        names = [s["name"] for s in reader.writer_schema]
        records = list(reader)
    assert names == ["solaris.v1.RequestEvent", "solaris.v1.ImpressionEvent"]
    assert records[0]["candidates"] == [1, 2, 3] and records[1]["label"] == 1


def test_same_input_gives_identical_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.avro", tmp_path / "b.avro"
    write_traffic(a, _events(), {"dataset": "hand", "seed": 1})
    write_traffic(b, _events(), {"dataset": "hand", "seed": 1})
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    "events",
    [
        [RequestEvent("r1", 7, T0 + 1, "feed", (1,)), RequestEvent("r2", 7, T0, "feed", (1,))],
        [ImpressionEvent("r1", 7, 1, T0, 0, 1)],  # impression before its request
        [RequestEvent("r1", 7, T0, "feed", (1,)), ImpressionEvent("r1", 8, 1, T0, 0, 1)],
        [RequestEvent("r1", 7, T0, "feed", (1,)), RequestEvent("r1", 7, T0, "feed", (1,))],
        [RequestEvent("r1", 7, T0, "feed", (1,)), ImpressionEvent("r1", 7, 1, T0, 0, 2)],
        [RequestEvent("r1", 7, 5, "feed", (1,))],  # event time out of range
    ],
    ids=["time-order", "orphan", "other-user", "duplicate-id", "bad-label", "bad-time"],
)
def test_writer_rejects_bad_streams_and_leaves_no_file(
    tmp_path: Path, events: list[RequestEvent | ImpressionEvent]
) -> None:
    path = tmp_path / "bad.avro"
    with pytest.raises(TrafficFormatError):
        write_traffic(path, events, {"dataset": "bad"})
    assert not path.exists()


def test_writer_rejects_unserialisable_metadata(tmp_path: Path) -> None:
    with pytest.raises(TrafficFormatError):
        write_traffic(tmp_path / "m.avro", _events(), {"when": object()})


def test_readers_reject_files_that_are_not_traffic(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.avro"
    garbage.write_bytes(b"not avro at all")
    plain = tmp_path / "plain.avro"
    with plain.open("wb") as fh:
        fastavro.writer(
            fh,
            {"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]},
            [{"a": 1}],
        )
    good = tmp_path / "good.avro"
    write_traffic(good, _events(), {"dataset": "hand"})
    cut = tmp_path / "cut.avro"
    cut.write_bytes(good.read_bytes()[:-40])
    for path in (garbage, plain):
        with pytest.raises(TrafficFormatError):
            traffic_metadata(path)
        with pytest.raises(TrafficFormatError):
            list(read_traffic(path))
    with pytest.raises(TrafficFormatError):
        load_traffic(cut)


def test_iter_events_needs_grouped_impressions(small: tuple[Requests, Impressions]) -> None:
    requests, impressions = small
    shuffled = dataclasses.replace(impressions, request_index=impressions.request_index[::-1])
    with pytest.raises(DataError, match="grouped"):
        list(iter_events(requests, shuffled))


def test_cli_writes_and_summarises_synthetic_traffic(tmp_path: Path) -> None:
    out = tmp_path / "cli.avro"
    runner = CliRunner()
    result = runner.invoke(
        data_cmd.app,
        [
            "traffic",
            "--dataset",
            "synthetic",
            "--out",
            str(out),
            "--users",
            "40",
            "--items",
            "300",
            "--days",
            "1",
            "--seed",
            "5",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "consecutive candidate Jaccard" in result.output
    assert traffic_metadata(out)["generator"]["n_users"] == 40
    result = runner.invoke(data_cmd.app, ["summary", str(out)])
    assert result.exit_code == 0, result.output
    assert '"seed": 5' in result.output


def test_cli_converts_movielens_from_data_dir(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "ml-100k"
    folder.mkdir(parents=True)
    lines = [
        f"{1 + n % 7}\t{10 + n % 13}\t{1 + n % 5}\t{1_000_000_000 + 20 * n}\n" for n in range(200)
    ]
    (folder / "u.data").write_text("".join(lines) + "bad\trow\n")
    out = tmp_path / "ml.avro"
    result = CliRunner().invoke(
        data_cmd.app,
        [
            "traffic",
            "--dataset",
            "movielens",
            "--out",
            str(out),
            "--data-dir",
            str(tmp_path / "data"),
            "--k",
            "10",
            "--session-gap-s",
            "30",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "field_count=1" in result.output
    meta = traffic_metadata(out)
    assert meta["converter"]["k"] == 10 and meta["converter"]["session_gap_s"] == 30.0
    assert meta["rows_skipped"] == {"field_count": 1}
    assert len(load_impressions(out)) <= 200


def test_cli_reports_a_missing_data_dir(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        data_cmd.app,
        [
            "traffic",
            "--dataset",
            "taobao",
            "--out",
            str(tmp_path / "x.avro"),
            "--data-dir",
            str(tmp_path / "absent"),
        ],
    )
    assert result.exit_code == 2
    assert "does not exist" in " ".join(result.output.split())  # rich wraps at the terminal width


def test_stats_on_a_hand_made_traffic() -> None:
    day = 86_400_000
    # User 1: requests at 0, +30 s, +5 min, +1 day; user 2: one request. Candidate sets chosen so
    # the three consecutive Jaccards are 1/3, 1, 0.
    requests = Requests.from_lists(
        ["a", "b", "c", "d", "e"],
        [1, 2, 1, 1, 1],
        [T0, T0 + 1, T0 + 30_000, T0 + 330_000, T0 + 330_000 + day],
        [[1, 2], [9], [2, 3], [3, 2], [7, 8]],
    )
    impressions = Impressions.from_lists([0, 2, 2], requests, [1, 2, 3], [0, 0, 1], [1, 0, 0])
    stats = traffic_stats(requests, impressions)
    assert (stats.requests, stats.users, stats.items, stats.impressions) == (5, 2, 6, 3)
    assert stats.gap_share_1m == pytest.approx(1 / 3)
    assert stats.gap_share_10m == pytest.approx(2 / 3)
    assert stats.consecutive_jaccard == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert stats.first_request_share == pytest.approx(2 / 5)
    assert stats.returning_user_share == pytest.approx(1 / 2)
    assert stats.label_rate == pytest.approx(1 / 3)
    assert stats.candidates_mean == pytest.approx(9 / 5)
    empty = traffic_stats(
        Requests.from_lists([], [], [], []),
        Impressions.from_lists([], Requests.from_lists([], [], [], []), [], [], []),
    )
    assert empty.requests == 0
