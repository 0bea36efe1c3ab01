"""The Prometheus config and alert rules pass promtool, and every alert has a rule test.

promtool comes with Debian's ``prometheus`` package: without it these tests skip, unless
SOLARIS_REQUIRE_SERVICES=1 (``make test``, CI), where ``infra/prometheus.sh install`` installs
it first (like the Redis tests install redis-server through infra/redis.sh).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from streams.settings import Settings
from tests.unit.test_dashboard import metric_names, registry_names

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool") or (
        "/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None
    )
    if found:
        return found
    if not Settings().require_services:
        pytest.skip("promtool not installed (infra/prometheus.sh install, or Debian's prometheus)")
    proc = subprocess.run(
        [str(INFRA / "prometheus.sh"), "install"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"infra/prometheus.sh install failed:\n{proc.stdout}{proc.stderr}"
    return "/usr/bin/promtool"


def run(promtool: str, *args: str) -> str:
    proc = subprocess.run([promtool, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed:\n{out}"
    return out


def alerts() -> list[dict]:
    groups = yaml.safe_load((INFRA / "alerts.yml").read_text())["groups"]
    return [rule for g in groups for rule in g["rules"] if "alert" in rule]


def test_prometheus_config_is_valid(promtool: str) -> None:
    out = run(promtool, "check", "config", "infra/prometheus.yml")
    assert "1 rule files found" in out


def test_generated_config_is_valid(promtool: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SOLARIS_PROMETHEUS_TARGETS": "a=127.0.0.1:1,b=127.0.0.1:2,a=127.0.0.1:3",
        "SOLARIS_PROMETHEUS_SCRAPE_INTERVAL": "2s",
    }
    text = subprocess.run(
        [str(INFRA / "prometheus.sh"), "config"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    (tmp_path / "p.yml").write_text(text)
    run(promtool, "check", "config", str(tmp_path / "p.yml"))
    conf = yaml.safe_load(text)
    assert conf["global"]["scrape_interval"] == "2s"
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in conf["scrape_configs"]}
    assert jobs == {"a": ["127.0.0.1:1", "127.0.0.1:3"], "b": ["127.0.0.1:2"]}


def test_alert_rules_are_valid(promtool: str) -> None:
    out = run(promtool, "check", "rules", "infra/alerts.yml")
    assert f"{len(alerts())} rules found" in out


def test_alert_rule_unit_tests_pass(promtool: str) -> None:
    out = run(promtool, "test", "rules", "infra/alerts_test.yml")
    assert "SUCCESS" in out


def test_required_alerts_exist_and_each_has_a_unit_test() -> None:
    names = {rule["alert"] for rule in alerts()}
    for needed in (
        "SolarisConsumerLagGrowing",
        "SolarisCoverageDropping",
        "SolarisDeadLetters",
        "SolarisStoreWriteErrors",
        "SolarisStoreReadErrors",
        "SolarisRankerSkippingMessages",
        "SolarisCorruptStoredValues",
    ):
        assert needed in names
    tests = yaml.safe_load((INFRA / "alerts_test.yml").read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t.get("alert_rule_test", [])}
    firing = {
        case["alertname"]
        for t in tests
        for case in t.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert names == tested, f"alerts without a rule test: {names - tested}"
    assert names == firing, f"alerts never tested firing: {names - firing}"


def test_alert_expressions_name_exported_metrics() -> None:
    known = registry_names()
    unknown = {
        (rule["alert"], n)
        for rule in alerts()
        for n in metric_names(rule["expr"])
        if n not in known
    }
    assert not unknown, f"alerts on metrics nobody exports: {sorted(unknown)}"
