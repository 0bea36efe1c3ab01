"""CLI output for scripts and narrow terminals, against the real broker and Redis.

``solaris coverage --json`` (the summary of the shared stats hashes the ranker and workers
write), ``solaris infra status --json`` for both services (and a Redis that is not there), and
``solaris lag`` at 80 columns with several groups under one long prefix: the issue's case, where
every row was cut to the same ``solaris-202612010…`` and rows could not be told apart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis
from confluent_kafka import TopicPartition
from typer.testing import CliRunner

from store.tiers import TIER_NAMES
from streams.cli.main import app
from streams.kafka_clients import make_consumer, make_producer
from streams.live.stats import LiveStats
from streams.settings import Settings
from streams.topics import create_topics
from tests.ports import free_port

pytestmark = pytest.mark.integration

#: what `solaris coverage --json` prints (streams.live.report.live_summary)
SUMMARY_KEYS = {
    "requests",
    "lookups",
    "coverage",
    "cumulative",
    "fm_pairs",
    "fm_pairs_per_request",
    "speculation_precision",
    "dead_letters",
    "read_ms",
    "reader_timeouts",
    "reader_store_errors",
    "baseline_fallbacks",
    "running_ne",
}


def cli_env(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        "SOLARIS_TOPIC_PREFIX": settings.topic_prefix,
        "SOLARIS_KEY_PREFIX": settings.key_prefix,
        "SOLARIS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SOLARIS_STORE_URL": settings.store_url,
        "COLUMNS": "80",
        **extra,
    }


@pytest.fixture()
def seeded_stats(test_settings: Settings, redis_url: str) -> Iterator[Settings]:
    """Shared stats hashes written through LiveStats, the writer the ranker and workers use."""
    ranker, pipeline = LiveStats(test_settings, "ranker"), LiveStats(test_settings, "pipeline")
    lookups = dict.fromkeys(TIER_NAMES, 0)
    lookups.update(exact=6, aggregate=2, missing=2)  # 10 lookups, 60 % exact
    ranker.add(
        {
            "requests": 10,
            "served_distinct": 3,
            "timeouts": 1,
            "store_errors": 0,
            "baseline_fallbacks": 1,
        }
    )
    ranker.add({f"lookups_{tier}": n for tier, n in lookups.items()})
    ranker.set({"read_ms_p50": 0.5, "read_ms_p99": 2.25, "live_ne_vm": 0.75})
    pipeline.add({"embedded": 12, "dead_letters_bad_record": 2})
    ranker.close()
    pipeline.close()
    yield test_settings
    client = redis.Redis.from_url(redis_url)
    client.delete(*(f"{test_settings.key_prefix}:stats:{r}" for r in ("ranker", "pipeline")))
    client.close()


def test_coverage_json_is_the_shared_stats_summary(seeded_stats: Settings) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["coverage", "--json"], env=cli_env(seeded_stats))
    assert out.exit_code == 0, out.output
    assert len(out.stdout.splitlines()) == 1  # one JSON document, nothing else on stdout
    body = json.loads(out.stdout)
    assert body.keys() == SUMMARY_KEYS
    assert (body["requests"], body["lookups"], body["fm_pairs"]) == (10, 10, 12)
    assert body["coverage"].keys() == set(TIER_NAMES)
    assert body["coverage"]["exact"] == pytest.approx(0.6)
    assert body["coverage"]["missing"] == pytest.approx(0.2)
    assert sum(body["coverage"].values()) == pytest.approx(1.0)
    assert body["cumulative"]["exact"] == pytest.approx(0.6)
    assert body["fm_pairs_per_request"] == pytest.approx(1.2)
    assert body["speculation_precision"] == pytest.approx(0.25)  # 3 served of 12 embedded
    assert body["dead_letters"] == {"bad_record": 2}
    assert body["read_ms"] == {"p50": 0.5, "p99": 2.25}
    assert (body["reader_timeouts"], body["reader_store_errors"]) == (1, 0)
    assert body["baseline_fallbacks"] == 1
    assert body["running_ne"] == {"vm": 0.75}
    table = runner.invoke(app, ["coverage"], env=cli_env(seeded_stats))
    assert table.exit_code == 0, table.output
    assert "10 / 10" in table.stdout and "0.600" in table.stdout
    assert "1 / 0 / 1" in table.stdout  # read timeouts / errors / plain-VM fallbacks
    assert max(len(line) for line in table.stdout.splitlines()) <= 80


def test_infra_status_json_reports_kafka_and_redis(
    test_settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["infra", "status", "--json"], env=cli_env(test_settings))
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body.keys() == {"kafka", "redis"}
    assert all(s["healthy"] is True and s["detail"] for s in body.values()), body
    assert "PING ok" in body["redis"]["detail"]
    # a Redis nobody runs: still JSON on stdout, healthy false, exit 1
    closed = f"redis://127.0.0.1:{free_port()}/0"
    env = cli_env(test_settings, SOLARIS_STORE_URL=closed)
    out = runner.invoke(app, ["infra", "status", "redis", "--json"], env=env)
    assert out.exit_code == 1, out.output
    body = json.loads(out.stdout)
    assert body.keys() == {"redis"} and body["redis"]["healthy"] is False
    assert "not running" in body["redis"]["detail"]


#: roles of groups under one prefix, like a deployment's pipeline/fm/ranker and a replay probe
GROUPS = ("pipeline", "fm", "ranker", "pipeline-canary")
TOPICS = ("requests", "impressions")


def commit_lag(settings: Settings) -> None:
    """Messages on each topic's two partitions, and per group a different committed offset."""
    producer = make_producer(settings)
    for topic in TOPICS:
        for part in (0, 1):
            for i in range(8):
                producer.produce(settings.topic(topic), value=b"x", key=b"%d" % i, partition=part)
    assert producer.flush(30) == 0
    for n, role in enumerate(GROUPS):
        consumer = make_consumer(settings, f"{settings.topic_prefix}-{role}")
        offsets = [TopicPartition(settings.topic(t), p, n + p) for t in TOPICS for p in (0, 1)]
        consumer.commit(offsets=offsets, asynchronous=False)
        consumer.close()


def table_rows(text: str) -> list[tuple[str, ...]]:
    """Body rows of a rich table (cells between ``│``); a folded cell's continuation lines
    (empty ``part`` cell) are joined to the row they continue."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.count("│") != 7:  # 6 columns: border, 5 separators, border
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[2] or not rows:
            rows.append(cells)
        else:
            rows[-1] = [a + b for a, b in zip(rows[-1], cells, strict=True)]
    return [tuple(r) for r in rows]


def test_lag_table_at_80_columns_tells_groups_under_one_long_prefix_apart(
    base_settings: Settings, kafka_bootstrap: str
) -> None:
    prefix = f"solaris-202612010930-{uuid.uuid4().hex[:12]}"  # 34 chars, like the issue's
    settings = base_settings.model_copy(
        update={"topic_prefix": prefix, "key_prefix": prefix, "topic_partitions": 2}
    )
    create_topics(settings, names=TOPICS)
    commit_lag(settings)
    runner = CliRunner()
    out = runner.invoke(app, ["lag", "--json"], env=cli_env(settings))
    assert out.exit_code == 0, out.output
    json_rows = json.loads(out.stdout)["rows"]
    assert {r["group"] for r in json_rows} == {f"{prefix}-{g}" for g in GROUPS}
    assert len(json_rows) == len(GROUPS) * len(TOPICS) * 2
    full = len(f"{prefix}-pipeline-canary") + len(f"{prefix}.impressions")
    assert full > 80  # full names side by side cannot fit: the case being tested

    out = runner.invoke(app, ["lag"], env=cli_env(settings))
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, out.stdout
    assert "…" not in out.stdout, out.stdout  # nothing cut
    shown = table_rows(out.stdout)
    n = len(prefix) + 1  # "<prefix>-" before a group, "<prefix>." before a topic
    expected = {
        (
            r["group"][n:],
            r["topic"][n:],
            *(str(r[k]) for k in ("partition", "committed", "end", "lag")),
        )
        for r in json_rows
    }
    assert len(shown) == len(json_rows) and len(set(shown)) == len(shown), out.stdout
    assert set(shown) == expected, out.stdout
    assert prefix in out.stdout  # the title says which prefix the short names are under
