"""Each benchmark's ``--smoke`` mode runs end to end and writes a result file of the agreed shape.

Timings are never asserted (they mean nothing at smoke size on a shared machine); the checks are
that every benchmark runs against the real Kafka/Redis, cleans up, and reports the ratio keys
issue 6 asks for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from bench.common import validate_shape
from bench.runner import run_bench
from streams.settings import Settings
from tests.conftest import require_kafka_and_redis

pytestmark = pytest.mark.integration

RATIO_KEYS = {
    "serve": {"p99_reader_over_floor_50", "p50_naive_over_reader_50"},
    "fm": {"embedder_over_bare_128", "live_over_bare_128"},
    "store": {"bytes_per_pair", "json_over_binary"},
    "pipeline": {"sustained_over_producer_max"},
    "fuse-verify": {"cpu_total_fused_over_separate_40", "cpu_pipeline_fused_over_separate_40"},
    "memory": {"rss_end_over_half_pipeline", "rss_end_over_half_fm"},
    "serve-http": {
        "http_p99_over_inprocess_p99",
        "http_p50_over_inprocess_p50",
        "http_json_p99_over_inprocess_p99",
    },
}


@pytest.fixture()
def settings(base_settings: Settings) -> Settings:
    require_kafka_and_redis(base_settings)
    return base_settings


def _check(path: Path, name: str) -> dict:
    doc = json.loads(path.read_text())
    validate_shape(doc)
    assert doc["bench"] == name
    assert doc["smoke"] is True
    assert RATIO_KEYS[name] <= set(doc["ratios"])
    return doc


def test_serve_smoke(settings: Settings, tmp_path: Path) -> None:
    run_bench("serve", settings, True, tmp_path / "serve.json")
    doc = _check(tmp_path / "serve.json", "serve")
    res = doc["results"]
    assert res["naive_serves_same_tiers"] is True
    assert set(res["tier_mix"]) == {
        "exact",
        "aggregate",
        "neighbour_item",
        "neighbour_aggregate",
        "state",
        "missing",
    }
    assert {"reader", "floor", "naive"} == set(res["n50"]["latency_ms"])
    client = redis.Redis.from_url(settings.store_url)
    try:  # the benchmark deletes what it wrote
        assert not list(client.scan_iter(match=f"{res['key_prefix']}:*", count=1000))
    finally:
        client.close()


def test_serve_http_smoke(settings: Settings, tmp_path: Path) -> None:
    run_bench("serve-http", settings, True, tmp_path / "serve-http.json")
    doc = _check(tmp_path / "serve-http.json", "serve-http")
    res = doc["results"]
    assert res["http_serves_same"] is True  # both HTTP forms answered what the reader did
    assert res["server_exit_code"] == 0  # the child server stopped cleanly on SIGTERM
    assert set(res["n20"]["latency_ms"]) == {"inprocess", "http_binary", "http_json"}
    assert res["server_counters"]["solaris_serve_requests_total{format=binary,status=200}"] > 0
    client = redis.Redis.from_url(settings.store_url)
    try:  # the benchmark deletes what it wrote
        assert not list(client.scan_iter(match=f"{res['key_prefix']}:*", count=1000))
    finally:
        client.close()


def test_store_smoke(settings: Settings, tmp_path: Path) -> None:
    run_bench("store", settings, True, tmp_path / "store.json")
    doc = _check(tmp_path / "store.json", "store")
    assert doc["ratios"]["bytes_per_pair"] > 0
    assert {"binary_f16", "json_f32", "int8"} <= set(doc["results"]["layouts"])


def test_fm_smoke(settings: Settings, tmp_path: Path) -> None:
    run_bench("fm", settings, True, tmp_path / "fm.json")
    doc = _check(tmp_path / "fm.json", "fm")
    assert doc["machine"]["fm_provider"] in doc["machine"]["onnxruntime_providers"]
    assert doc["results"]["live"]["pairs"] > 0


def test_pipeline_smoke_through_the_cli(settings: Settings, tmp_path: Path) -> None:
    from streams.cli.main import app

    out = tmp_path / "pipeline.json"
    result = CliRunner().invoke(app, ["bench", "pipeline", "--smoke", "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = _check(out, "pipeline")
    assert doc["results"]["steps"] and doc["results"]["producer_max"]["events"] > 0
    assert "| target ev/s |" in result.output
    # CPU µs per event per process, measured from /proc over each step (issue 23)
    cpu = doc["results"]["steps"][0]["cpu_us_per_event"]
    assert set(cpu) == {"pipeline", "fm", "broker", "redis", "total"}
    assert all(cpu[k] is not None and cpu[k] > 0 for k in ("pipeline", "fm", "broker", "total"))
    assert cpu["total"] >= cpu["pipeline"] + cpu["fm"]


def test_fuse_verify_smoke_runs_both_topologies(settings: Settings, tmp_path: Path) -> None:
    run_bench("fuse-verify", settings, True, tmp_path / "fuse.json")
    doc = _check(tmp_path / "fuse.json", "fuse-verify")
    steps = doc["results"]["steps"]
    assert {s["mode"] for s in steps} == {"separate", "fused"}
    for mode in ("separate", "fused"):  # each deployment did the work whose CPU is compared
        (counters,) = [s["counters"] for s in steps if s["mode"] == mode and "counters" in s]
        assert counters["verified"] > 0 and counters["embedded"] > 0, (mode, counters)
    assert all(s["cpu_us_per_event"]["pipeline"] > 0 for s in steps)


def test_paced_rates_with_two_pipeline_workers_and_a_burst(settings: Settings) -> None:
    from bench.paced_rates import run

    doc = run((40.0,), 4.0, {}, smoke=True, pipeline_workers=2, burst_events=60, settings=settings)
    assert doc["pipeline_workers"] == 2 and "pipeline_workers=2" in doc["label"]
    paced, burst = doc["steps"]
    assert paced["target_events_per_s"] == 40.0 and not paced.get("burst")
    # the unpaced step drained within its timeout, every event sent, its CPU per event measured
    assert burst["burst"] is True and burst["kept_up"] is True and burst["seconds"] > 0
    assert burst["events"] == 60 and burst["achieved_events_per_s"] > 0
    assert burst["cpu_us_per_event"]["pipeline"] > 0
    assert burst["counters"]["verified"] > 0 and burst["counters"]["embedded"] > 0


def test_memory_smoke_samples_each_workers_rss_through_the_replay(
    settings: Settings, tmp_path: Path
) -> None:
    run_bench("memory", settings, True, tmp_path / "memory.json")
    doc = _check(tmp_path / "memory.json", "memory")
    res = doc["results"]
    assert res["drained"] is True and res["traffic"]["events"] > 0
    assert res["pairs_embedded"] > 0  # the workers did the work whose memory is measured
    for worker in ("pipeline", "fm"):
        w = res["workers"][worker]
        assert w["samples"] >= 3
        # a Python worker with onnxruntime loaded holds tens of MiB at least
        assert 20 < w["rss_mib_warm"] <= w["rss_mib_max"]
    cpu = res["cpu_us_per_event"]
    assert set(cpu) == {"pipeline", "fm", "total"} and cpu["pipeline"] > 0 and cpu["fm"] > 0
    sent = [s["events"] for s in res["samples"]]
    assert sent == sorted(sent) and sent[-1] == res["traffic"]["events"]
