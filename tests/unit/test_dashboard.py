"""Every PromQL expression of the Grafana dashboard names only metrics SOLARIS exports.

The exported names come from the registry (the metric definitions of workers and the ranker,
and the lag exporter's collector), expanded the way the exposition format names samples
(``_total``, ``_bucket``/``_sum``/``_count``, ``_info``). The live test
(tests/integration/test_prometheus.py) checks the same expressions against what Prometheus
actually scraped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY
from prometheus_client.core import Metric

from streams.lag_exporter import LagCollector

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana-dashboard.json"

_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "inf",
        "nan",
    ]
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (not functions, labels, keywords, durations).

    Strips strings, label matchers ``{...}``, ranges ``[...]`` and grouping clauses, then keeps
    identifiers that are not followed by ``(`` (a function call).
    """
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def sample_names(family: Metric) -> set[str]:
    """Names of the samples a family is exposed as (also when it has no samples yet)."""
    n = family.name
    return {
        "counter": {f"{n}_total"},
        "histogram": {f"{n}_bucket", f"{n}_sum", f"{n}_count"},
        "summary": {f"{n}_sum", f"{n}_count"},
        "info": {f"{n}_info"},
    }.get(family.type, {n})


def registry_names() -> set[str]:
    """Every SOLARIS sample name: worker/ranker metrics and the lag exporter's families."""
    from streams.live import metrics

    metrics.init_ranker_series()  # the ranker-only gauges register in the ranker process
    families = [f for f in REGISTRY.collect() if f.name.startswith("solaris_")]
    families += LagCollector().describe()
    return set().union(*(sample_names(f) for f in families))


def dashboard_exprs(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel."""
    board = json.loads(path.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def test_metric_names_parser() -> None:
    expr = (
        'sum by (tier) (rate(solaris_lookups_total{tier!="missing",job=~"a.*"}[1m])) '
        "/ ignoring(tier) group_left sum(rate(solaris_lookups_total[1m] offset 1h)) > bool 0.5"
    )
    assert metric_names(expr) == {"solaris_lookups_total"}
    assert metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(solaris_read_seconds_bucket[5m])))"
    ) == {"solaris_read_seconds_bucket"}
    assert metric_names("time() - solaris_x_seconds and on(job) up == 0") == {
        "solaris_x_seconds",
        "up",
    }
    assert metric_names('label_replace(a, "dst", "$1", "src", "(.*)")') == {"a"}


def test_registry_knows_the_new_operator_metrics() -> None:
    names = registry_names()
    for name in (
        "solaris_consumer_lag_messages",
        "solaris_served_feature_age_seconds_bucket",
        "solaris_model_info",
        "solaris_speculation_precision",
        "solaris_reader_timeouts_total",
        "solaris_live_ne",
    ):
        assert name in names


def test_every_dashboard_expression_names_exported_metrics() -> None:
    known = registry_names()
    exprs = dashboard_exprs()
    assert exprs
    unknown = {
        (title, name) for title, expr in exprs for name in metric_names(expr) if name not in known
    }
    assert not unknown, f"panels query metrics nobody exports: {sorted(unknown)}"
    for _, expr in exprs:
        assert metric_names(expr), f"no metric in {expr!r}"


def test_dashboard_has_operator_panels() -> None:
    used = set().union(*(metric_names(e) for _, e in dashboard_exprs()))
    for name in (
        "solaris_consumer_lag_messages",  # lag
        "solaris_served_feature_age_seconds_bucket",  # freshness
        "solaris_model_info",  # model version
        "solaris_live_ne",  # live quality
        "solaris_speculation_precision",
        "solaris_lookups_total",  # coverage
        "solaris_reader_corrupt_values_total",  # stored values rejected, not served
        "solaris_ranker_bad_messages_total",  # undecodable requests/impressions skipped
        "solaris_ranker_failed_messages_total",  # handling raised, message skipped
    ):
        assert name in used, f"no panel on {name}"


def test_ranker_skips_panel_plots_its_three_counters() -> None:
    """The ranker's silent skips (bad or failed messages, corrupt values) share one panel,
    bad messages split by topic, so an operator sees what the ranker dropped."""
    exprs = [e for t, e in dashboard_exprs() if t == "Ranker: skipped messages and corrupt values"]
    assert exprs, "no panel 'Ranker: skipped messages and corrupt values'"
    used = set().union(*(metric_names(e) for e in exprs))
    assert used == {
        "solaris_reader_corrupt_values_total",
        "solaris_ranker_bad_messages_total",
        "solaris_ranker_failed_messages_total",
    }
    assert any(
        "solaris_ranker_bad_messages_total" in e and re.search(r"\bby \(topic\)", e) for e in exprs
    ), "bad messages not split by topic"


def test_panel_ids_unique_and_panels_do_not_overlap() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        g = p["gridPos"]
        area = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & area, f"panel {p['title']!r} overlaps another"
        cells |= area
