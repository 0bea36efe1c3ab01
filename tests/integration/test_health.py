"""/healthz and /readyz on the ranker and on workers, against the real broker and Redis.

Covers the stateless FM worker and the stateful pipeline worker (its readiness waits for table
recovery), and a real 503: a private Redis stopped under a running ranker and worker.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from streams.live.health import readiness
from streams.settings import Settings
from tests.integration.live_harness import Procs, fresh_live_settings
from tests.integration.redis_instance import own_redis
from tests.integration.test_bind_host import listening_addresses
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def get(port: int, path: str) -> tuple[int, dict]:
    """Status and JSON body (``{"unparsed": text}`` when the body is not JSON)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"unparsed": raw.decode(errors="replace")}


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
        # Faust's own pages (table contents, router) are not served: the port is for probes
        # and metrics only (issue 24, item 8)
        for page in ("/router/", "/table/history/1/", "/table/", "/graph/", "/stats/"):
            assert get(worker_port, page)[0] == 404, page
        assert listening_addresses(ranker_port) == listening_addresses(worker_port) == {"127.0.0.1"}
    finally:
        procs.stop_all()


#: pipeline roles (bench/live.py PIPELINE_ROLES): the stateful worker, four tables
PIPELINE_ROLES = "history,speculate,verify,aggregate,neighbours"
#: history values put in the changelog before the worker starts: enough that recovering them
#: takes seconds here (~4k records/s measured on this 2-core box), so readiness is seen waiting
RECOVERED_RECORDS = 20_000
STARTUP_CHECKS = {"partitions_assigned", "not_rebalancing", "tables_recovered"}


def watch_readyz(
    procs: Procs, name: str, port: int, timeout_s: float = 180
) -> tuple[list[dict], dict, str]:
    """Poll /readyz every 50 ms until 200: the distinct 503 bodies seen before, the 200 body,
    and the log of process ``name`` at that moment."""
    deadline = time.monotonic() + timeout_s
    seen: list[dict] = []
    while time.monotonic() < deadline:
        procs.alive()
        try:
            status, body = get(port, "/readyz")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.05)
            continue
        if status == 200:
            return seen, body, procs.log(name)
        assert status == 503, (status, body)
        if not seen or seen[-1] != body:
            seen.append(body)
        time.sleep(0.05)
    raise AssertionError(f"not ready after {timeout_s} s: {seen[-3:]}")


def fill_history_changelog(settings: Settings, n: int) -> None:
    """``n`` users' history in the pipeline's history changelog, so a fresh worker (empty
    RocksDB dir under the new prefix) must recover them before it may say ready."""
    from streams.kafka_clients import make_producer
    from streams.topics import create_changelog_topics

    changelog = f"{settings.topic_prefix}-pipeline-history-changelog"
    create_changelog_topics(settings, [changelog])
    producer = make_producer(settings)
    for user in range(n):
        value = json.dumps([[user % 300, 1, 1_000]]).encode()
        partition = user % settings.topic_partitions
        producer.produce(changelog, key=json.dumps(user).encode(), value=value, partition=partition)
        if user % 5_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_pipeline_worker_is_ready_only_after_assignment_and_table_recovery(
    bundle: Path, tmp_path: Path
) -> None:
    """The stateful worker's /readyz: 503 while partitions are unassigned and while its tables
    recover from their changelog, then 200 naming all five checks."""
    from streams.lag import LagReader
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    fill_history_changelog(settings, RECOVERED_RECORDS)
    port = free_port()
    procs = Procs(settings, tmp_path)
    try:
        procs.start("pipeline", "worker", "--agents", PIPELINE_ROLES, "--web-port", str(port))
        seen, body, log = watch_readyz(procs, "pipeline", port)
        assert body == {
            "ready": True,
            "checks": dict.fromkeys(
                (
                    "partitions_assigned",
                    "not_rebalancing",
                    "tables_recovered",
                    "store_reachable",
                    "batches_finishing",
                ),
                True,
            ),
            "failing": [],
        }
        # Faust said so too: recovery finished before the worker called itself ready
        assert "Recovery complete" in log, log[-3000:]
        reader = LagReader(settings)
        try:  # and the group coordinator has the worker holding partitions
            assert reader.assigned([f"{settings.topic_prefix}-pipeline"])[
                f"{settings.topic_prefix}-pipeline"
            ]
        finally:
            reader.close()
        failing = [set(b["failing"]) for b in seen]
        assert all(f and f <= STARTUP_CHECKS for f in failing), seen  # never the store
        assert any("partitions_assigned" in f for f in failing), seen  # web is up before the join
        assert any("tables_recovered" in f for f in failing), seen  # 20k records take seconds
        assert get(port, "/healthz") == (200, {"live": True})
    finally:
        procs.stop_all()


def test_readyz_is_503_naming_the_store_while_redis_is_down(bundle: Path, tmp_path: Path) -> None:
    """Ranker and worker on a private Redis: stop it and /readyz answers 503 with
    ``failing == ["store_reachable"]`` while /healthz stays 200; start it and both are ready."""
    from streams.topics import create_topics

    with own_redis(tmp_path / "redis") as redis_server:
        settings = fresh_live_settings(bundle, store_url=redis_server.url)
        create_topics(settings)
        ports = {"ranker": free_port(), "fm": free_port()}
        procs = Procs(settings, tmp_path)
        try:
            procs.start("ranker", "ranker", "--health-port", str(ports["ranker"]))
            procs.start("fm", "worker", "--agents", "embed", "--web-port", str(ports["fm"]))
            for port in ports.values():
                wait_ready(procs, port)
            redis_server.stop()
            for name, port in ports.items():
                status, body = get(port, "/readyz")
                assert status == 503 and body["failing"] == ["store_reachable"], (name, body)
                assert body["checks"]["partitions_assigned"] is True, (name, body)
                assert get(port, "/healthz") == (200, {"live": True}), name
            redis_server.start()
            for port in ports.values():
                assert wait_ready(procs, port, timeout_s=30)["checks"]["store_reachable"]
        finally:
            procs.stop_all()
