"""/healthz and /readyz on the ranker and on a worker, against the real broker and Redis."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from streams.live.health import readiness
from tests.integration.live_harness import Procs, fresh_live_settings
from tests.integration.test_bind_host import free_port, listening_addresses

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_ready(procs: Procs, port: int, timeout_s: float = 90) -> dict:
    deadline = time.monotonic() + timeout_s
    last: tuple[int, dict] = (0, {})
    while time.monotonic() < deadline:
        procs.alive()
        try:
            last = get(port, "/readyz")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)
            continue
        if last[0] == 200:
            return last[1]
        time.sleep(0.3)
    raise AssertionError(f"not ready after {timeout_s} s: {last}")


def test_readiness_names_failing_checks() -> None:
    assert readiness({"a": True, "b": True}) == (
        200,
        {"ready": True, "checks": {"a": True, "b": True}, "failing": []},
    )
    status, body = readiness({"partitions_assigned": False, "store_reachable": True})
    assert status == 503 and body["failing"] == ["partitions_assigned"]


def test_ranker_and_worker_health_endpoints(bundle: Path, tmp_path: Path) -> None:
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    ranker_port, worker_port = free_port(), free_port()
    procs = Procs(settings, tmp_path)
    try:
        procs.start("ranker", "ranker", "--health-port", str(ranker_port))
        procs.start("fm", "worker", "--agents", "embed", "--web-port", str(worker_port))
        body = wait_ready(procs, ranker_port)
        assert body["checks"] == {"partitions_assigned": True, "store_reachable": True}
        assert get(ranker_port, "/healthz") == (200, {"live": True})
        body = wait_ready(procs, worker_port)
        assert body["ready"] and body["checks"]["store_reachable"]
        assert get(worker_port, "/healthz")[0] == 200
        assert listening_addresses(ranker_port) == listening_addresses(worker_port) == {"127.0.0.1"}
    finally:
        procs.stop_all()
