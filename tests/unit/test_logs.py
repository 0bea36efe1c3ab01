from __future__ import annotations

import json
import logging

import pytest

from streams.logs import configure_logging


def test_extra_fields_are_rendered_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", json=True)
    try:
        logging.getLogger("solaris.test").info("topic created", extra={"topic": "t1", "n": 3})
        line = capsys.readouterr().err.strip().splitlines()[-1]
        event = json.loads(line)
        assert event["event"] == "topic created"
        assert event["topic"] == "t1" and event["n"] == 3
        assert event["level"] == "info"
    finally:
        logging.getLogger().handlers.clear()


def test_dashboard_queries_only_metrics_we_export() -> None:
    """The Grafana dashboard must not chart metrics that no process exports."""
    import re

    from prometheus_client import REGISTRY

    import streams.live.metrics  # noqa: F401  (registers the metrics)
    from streams.settings import REPO_ROOT

    dash = json.loads((REPO_ROOT / "infra" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"solaris_[a-z_]+", e)}
    exported = {
        metric.name + suffix
        for metric in REGISTRY.collect()
        for suffix in ("", "_total", "_bucket", "_sum", "_count")
    }
    assert used and used <= exported, used - exported
