"""A live run scraped by a real Prometheus; PromQL answers coverage, lag, read p99, freshness.

Pipeline worker, FM worker, ranker and ``solaris exporter`` run with metrics ports; a Prometheus
started by ``infra/prometheus.sh`` on its own port and data dir scrapes them every second. After
a replay drains, the test asks Prometheus's HTTP API and compares with the ranker's own counters
(the shared stats hash), and checks that every dashboard expression evaluates and names only
metrics the run exported (an explicit allow-list for those a clean run never increments).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streams.settings import Settings
from tests.integration.live_harness import Procs, fresh_live_settings, wait_drained
from tests.ports import free_port
from tests.unit.test_dashboard import dashboard_exprs, metric_names

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "infra" / "prometheus.sh"


@dataclass
class Prometheus:
    port: int

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (or a scalar as one sample)."""
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        rows = self.query(expr)
        return float(rows[0]["value"][1]) if rows else None

    def names(self) -> set[str]:
        return set(self._get("/api/v1/label/__name__/values")["data"])

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            body: dict[str, Any] = json.loads(r.read())
        assert body["status"] == "success", body
        return body


def _script(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), cmd], env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture()
def prometheus_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Env of a private Prometheus (free port, data dir under tmp_path); stopped at the end."""
    if not Path("/usr/bin/prometheus").exists() and not Settings().require_services:
        pytest.skip("prometheus not installed (infra/prometheus.sh install)")
    env = {
        **os.environ,
        "SOLARIS_PROMETHEUS_PORT": str(free_port()),
        "SOLARIS_PROMETHEUS_DATA_DIR": str(tmp_path / "prometheus"),
        "SOLARIS_PROMETHEUS_SCRAPE_INTERVAL": "1s",
    }
    yield env
    _script("stop", env)


def wait_for(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def test_prometheus_scrapes_a_live_run(
    traffic: Path, bundle: Path, tmp_path: Path, prometheus_env: dict[str, str]
) -> None:
    from models.bundle import BundleMeta
    from streams.kafka_clients import make_producer
    from streams.lag import wait_for_groups
    from streams.replay import replay_file
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    ports = {name: free_port() for name in ("pipeline", "fm", "ranker", "lag")}
    prometheus_env["SOLARIS_PROMETHEUS_TARGETS"] = ",".join(
        f"solaris-{name}=127.0.0.1:{port}" for name, port in ports.items()
    )
    started = _script("start", prometheus_env)
    assert started.returncode == 0, started.stdout + started.stderr
    prom = Prometheus(int(prometheus_env["SOLARIS_PROMETHEUS_PORT"]))
    procs = Procs(settings, tmp_path)
    p = settings.topic_prefix
    try:
        procs.start(
            "pipeline",
            *("worker", "--agents", "history,speculate,verify,aggregate,neighbours"),
            *("--metrics-port", str(ports["pipeline"])),
        )
        procs.start("fm", "worker", "--agents", "embed", "--metrics-port", str(ports["fm"]))
        procs.start("ranker", "ranker", "--metrics-port", str(ports["ranker"]))
        procs.start("exporter", "exporter", "--port", str(ports["lag"]), "--interval", "1")
        wait_for_groups(settings, [f"{p}-pipeline", f"{p}-fm", f"{p}-ranker"], timeout_s=120)
        producer = make_producer(settings)  # one dead letter, so its series exists
        producer.produce(settings.topic("requests"), key=b"1", value=b"not avro")
        producer.flush(10)
        # lockstep: the pipeline drains before each request, so the ranker reads what the
        # FM wrote (at full speed the ranker outruns the FM and everything is "missing")
        with _lockstep(settings, procs) as lockstep:
            replay = replay_file(settings, traffic, speed=0.0, lockstep=lockstep)
        wait_drained(settings, procs)
        time.sleep(2.0)  # workers flush their shared counters once a second
        summary = wait_for("final counters scraped", lambda: _scraped_final(prom, settings))
        lag_rows = wait_for(
            "drained lag scraped",
            lambda: (
                (rows := prom.query(f'solaris_consumer_lag_messages{{group=~"{p}-.*"}}'))
                and all(float(r["value"][1]) == 0 for r in rows)
                and rows
            ),
        )
        answers = _check_answers(prom, settings, summary, lag_rows)
        answers["requests"] = replay.requests
        version = BundleMeta.read(bundle / "meta.json").model_version
        for role in ("ranker", "pipeline", "fm"):  # every process says which model it runs
            model = prom.query(f'solaris_model_info{{role="{role}"}}')
            assert model and model[0]["metric"]["version"] == version, role
        _check_dashboard_and_rules(prom)
        print("PromQL answers:", json.dumps(answers, indent=1))
    finally:
        procs.stop_all()


def _scraped_final(prom: Prometheus, settings: Settings) -> dict[str, Any] | None:
    """The live summary once Prometheus has scraped the same totals (lookups count per request;
    the ranker sets the precision gauge when it publishes, the FM workers flush their counts to
    the shared stats once a second), else None."""
    from streams.live.report import live_summary

    summary = live_summary(settings)
    lookups = prom.value("sum(solaris_lookups_total)")
    precision = prom.value("solaris_speculation_precision")
    if lookups != summary["lookups"] or precision is None:
        return None
    return summary if precision == pytest.approx(summary["speculation_precision"]) else None


@contextmanager
def _lockstep(settings: Settings, procs: Procs) -> Iterator[Callable[[], None]]:
    from streams.lag import LagReader

    reader = LagReader(settings)
    topics = [
        settings.topic(t)
        for t in ("requests", "impressions", "speculated", "verified", "embeddings")
    ]

    def wait() -> None:
        procs.alive()
        assert reader.wait_drained(reader.groups(), topics, timeout_s=60), "lockstep timed out"

    yield wait
    reader.close()


def _check_answers(
    prom: Prometheus, settings: Settings, summary: dict[str, Any], lag_rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """Coverage, lag, read p99, freshness and precision from PromQL, against the ranker's own
    counters; returns the answers (printed for the report)."""
    p = settings.topic_prefix
    coverage = {
        r["metric"]["tier"]: float(r["value"][1])
        for r in prom.query(
            "sum by (tier) (solaris_lookups_total) / ignoring(tier) group_left "
            "sum(solaris_lookups_total)"
        )
    }
    assert coverage.keys() == summary["coverage"].keys()
    for tier, share in summary["coverage"].items():
        assert coverage[tier] == pytest.approx(share, abs=1e-9), tier
    assert sum(coverage.values()) == pytest.approx(1.0)
    assert coverage["missing"] < 1.0  # the run served something

    groups = {r["metric"]["group"] for r in lag_rows}
    assert {f"{p}-pipeline", f"{p}-fm", f"{p}-ranker"} <= groups
    lag_topics = {(r["metric"]["group"], r["metric"]["topic"]) for r in lag_rows}
    assert (f"{p}-ranker", settings.topic("requests")) in lag_topics
    assert (f"{p}-fm", settings.topic("verified")) in lag_topics
    max_lag = prom.value(
        f'max(max_over_time(solaris_consumer_lag_messages{{group=~"{p}-.*"}}[10m]))'
    )

    p99 = prom.value("histogram_quantile(0.99, sum by (le) (solaris_read_seconds_bucket))")
    assert p99 is not None and 0 < p99 <= 0.25
    exact_p99_s = summary["read_ms"]["p99"] / 1000.0
    bounds = (0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25)
    i = next(k for k in range(1, len(bounds)) if exact_p99_s <= bounds[k])
    assert bounds[max(i - 2, 0)] <= p99 <= bounds[min(i + 1, len(bounds) - 1)], (p99, exact_p99_s)

    age_counts = {
        r["metric"]["tier"]: float(r["value"][1])
        for r in prom.query("sum by (tier) (solaris_served_feature_age_seconds_count)")
    }
    lookups = {
        r["metric"]["tier"]: float(r["value"][1])
        for r in prom.query("sum by (tier) (solaris_lookups_total)")
    }
    assert "missing" not in age_counts
    for tier, n in age_counts.items():
        assert n == lookups[tier], tier  # one age per served lookup
    age_p50 = {
        r["metric"]["tier"]: float(r["value"][1])
        for r in prom.query(
            "histogram_quantile(0.5, sum by (le, tier) (solaris_served_feature_age_seconds_bucket))"
        )
        if r["value"][1] != "NaN"
    }
    ttl_s = {"exact": settings.pair_ttl_ms / 1000, "aggregate": settings.aggregate_ttl_ms / 1000}
    for tier, age in age_p50.items():
        assert 0 < age <= ttl_s.get(tier, settings.neighbour_aggregate_ttl_ms / 1000), tier

    # only the ranker exports it (a worker's constant 0 beside it would be a bogus series)
    assert len(prom.query("solaris_speculation_precision")) == 1
    precision = prom.value("solaris_speculation_precision")
    assert precision is not None and 0 < precision <= 1
    assert precision == pytest.approx(summary["speculation_precision"], rel=1e-6)
    assert (prom.value("sum(solaris_dead_letters_total)") or 0) >= 1
    ne = {r["metric"]["model"]: float(r["value"][1]) for r in prom.query("solaris_live_ne")}
    # a running NE over tens of impressions of a tiny model: only sane, not good
    assert ne.keys() == {"vm", "vm_solaris_served"}, ne
    assert all(0 < v < 10 for v in ne.values()), ne
    return {
        "coverage": coverage,
        "max_lag_during_run": max_lag,
        "lag_series": len(lag_rows),
        "read_p99_s": p99,
        "ranker_exact_read_p99_s": exact_p99_s,
        "age_p50_s": age_p50,
        "precision": precision,
        "live_ne": ne,
    }


#: Dashboard metrics a clean run legitimately never exports, each with the reason. Labelled
#: families have no series until their first event, and this run has no store failure. Keep it
#: short: a panel on any other metric must be fed by the live run.
NOT_IN_A_CLEAN_RUN = frozenset(
    {
        # labelled by op: a series appears only when a store write or read fails
        "solaris_store_errors_total",
    }
)


def _check_dashboard_and_rules(prom: Prometheus) -> None:
    """Every dashboard expression evaluates in Prometheus and every metric it names was
    scraped from this run (or is in :data:`NOT_IN_A_CLEAN_RUN`); the alert rules loaded
    healthy."""
    from tests.unit.test_dashboard import registry_names

    assert NOT_IN_A_CLEAN_RUN.issubset(registry_names())  # the allow-list names real metrics
    scraped = prom.names()
    missing = set()
    for title, expr in dashboard_exprs():
        prom.query(expr)  # raises on a PromQL error (status != success)
        names = metric_names(expr)
        missing |= {(title, n) for n in names - scraped - NOT_IN_A_CLEAN_RUN}
    assert not missing, f"dashboard metrics the live run did not export: {sorted(missing)}"
    rules = prom._get("/api/v1/rules")["data"]["groups"]
    health = {r["name"]: r["health"] for g in rules for r in g["rules"]}
    assert health and all(h != "err" for h in health.values()), health
