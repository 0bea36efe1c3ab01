"""The demo's summary pieces: the JSON shape (what of the offline run it keeps), the FM's
lag percentiles, and the read-latency histogram scraped from a metrics endpoint."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from streams.app.demo_summary import behind_summary, scrape_read_latency, summary_json
from tests.ports import free_port

METRICS = b"""# HELP solaris_read_seconds Feature read latency.
# TYPE solaris_read_seconds histogram
solaris_read_seconds_bucket{le="0.005"} 3.0
solaris_read_seconds_bucket{le="0.001"} 1.0
solaris_read_seconds_bucket{le="+Inf"} 4.0
solaris_read_seconds_count 4.0
solaris_read_seconds_sum 0.0123
# HELP other_total Something else.
# TYPE other_total counter
other_total 7.0
"""


def test_summary_keeps_the_offline_figures_the_report_compares_including_the_fair_vm() -> None:
    replay = SimpleNamespace(messages=10, requests=4, seconds=2.0, rate=5.0)
    offline = {
        "cumulative": {"exact": 0.5},
        "ne": {"vm": {"ne": 0.9}},
        "vs_fair_vm": {"available": True, "fm_gain": 0.01},
        "sweep": [1, 2, 3],  # not compared live: left out
    }
    out = summary_json({"requests": 4}, offline, max_lag=7, replay=replay)
    assert out["max_consumer_lag"] == 7 and out["replay"]["rate"] == 5.0
    assert set(out["offline"]) == {"cumulative", "ne", "vs_fair_vm"}
    assert "offline" not in summary_json({}, None, 0, replay)


def test_behind_summary_in_seconds() -> None:
    got = behind_summary([1_000, 2_000, 3_000, 10_000])
    assert got["max"] == 10.0 and got["p50"] == 2.5
    assert behind_summary([]) == {}


@pytest.fixture()
def metrics_port() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(METRICS)

        def log_message(self, *_: object) -> None:
            pass

    port = free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield port
    server.shutdown()
    server.server_close()


def test_scrape_reads_the_read_histogram_sorted_and_nothing_else(metrics_port: int) -> None:
    got = scrape_read_latency(metrics_port)
    assert got["buckets"] == [[0.001, 1.0], [0.005, 3.0], [float("inf"), 4.0]]
    assert got["count"] == 4.0 and got["sum"] == pytest.approx(0.0123)


def test_scrape_of_an_unreachable_ranker_is_empty() -> None:
    assert scrape_read_latency(free_port(), timeout_s=0.5) == {}
