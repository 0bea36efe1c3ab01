"""Scale-out: 2 pipeline workers + 2 FM workers on 4 partitions, checked against the simulator.

Four ``solaris worker`` processes (each with its own cache dir, hence its own Faust/RocksDB data
dir, and its own Prometheus port) share the run's two consumer groups. The replay is lockstep
(every group drains before each request), so the split of users over workers must not change
any value: the history attached to every verified pair, every exact pair vector and every user
aggregate in Redis must be *byte-identical* to the simulator's on the same traffic.

The test also proves the work really was split: each group has two members, each owning
partitions of the topic it consumes, the assignment does not move during the replay, and every
worker's own counters (scraped from its metrics endpoint) show it verified, aggregated or
embedded pairs, the FM workers' counts summing to the pairs in the ``verified`` topic.

The verifier ranks by the users' pair memory alone (``pair``): stored per-user state (the
``recent`` table), so the split of users over workers must not change which pairs are kept. The
default ``recurrence`` ranking adds the item prior, which each worker counts over the pair
memories of its own partitions' users only, so with two workers it may keep other pairs than the
simulator (Scaling out in docs/live-pipeline.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.live import scrape
from bench.scale_out import recovered
from streams.lag import LagReader
from streams.settings import Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import (
    PIPELINE_AGENTS,
    STATELESS_RANKING,
    FaultProcs,
    wait_for,
)
from tests.integration.live_harness import live_settings, wait_drained
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIVE_TOPICS = ("requests", "impressions", "speculated", "verified", "embeddings")
#: worker name -> (group suffix, roles)
WORKERS = {
    "pipeline1": ("pipeline", PIPELINE_AGENTS),
    "pipeline2": ("pipeline", PIPELINE_AGENTS),
    "fm1": ("fm", "embed"),
    "fm2": ("fm", "embed"),
}
#: the topic whose partitions show how a group's work is split
SPLIT_TOPIC = {"pipeline": "requests", "fm": "verified"}
PIPELINE_COUNTERS = ("solaris_verified_pairs_total", "solaris_aggregates_written_total")
FM_COUNTER = "solaris_pairs_embedded_total"
Assignment = dict[str, frozenset[int]]  #: member id -> partitions of the group's SPLIT_TOPIC


def assignment(reader: LagReader, settings: Settings, suffix: str) -> Assignment:
    """Member -> partitions of the group's split topic ({} unless the group is Stable)."""
    from confluent_kafka import ConsumerGroupState

    group = f"{settings.topic_prefix}-{suffix}"
    desc = reader.admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    if desc.state != ConsumerGroupState.STABLE:
        return {}
    topic = settings.topic(SPLIT_TOPIC[suffix])
    return {
        m.member_id: frozenset(
            tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic
        )
        for m in desc.members
        if m.assignment is not None
    }


def split_in_two(a: Assignment, partitions: int) -> bool:
    """Two members, each owning partitions, together owning each partition once."""
    owned = sorted(p for ps in a.values() for p in ps)
    return len(a) == 2 and all(a.values()) and owned == list(range(partitions))


def start_workers(procs: FaultProcs, data_root: Path) -> dict[str, int]:
    """Start the four workers; returns worker name -> metrics port."""
    ports: dict[str, int] = {}
    for name, (_, roles) in WORKERS.items():
        ports[name] = free_port()
        procs.start(
            name,
            "worker",
            "--agents",
            roles,
            "--metrics-port",
            str(ports[name]),
            env={
                "SOLARIS_STATE_DIR": str(data_root / name),  # own Faust / RocksDB data dir
                "SOLARIS_LOG_LEVEL": "INFO",  # the rebalance lines `recovered` reads
            },
        )
    return ports


@pytest.fixture(scope="module")
def scale_run(
    traffic: Path, bundle: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    from streams.replay import replay_file
    from streams.topics import create_topics
    from tests.integration.value_parity import live_values

    base = Settings()
    require_kafka_and_redis(base)
    ranking = {**STATELESS_RANKING, "verifier_rank_by": "pair"}
    settings = live_settings(base, uuid.uuid4().hex[:10], bundle, 4, **ranking)
    root = tmp_path_factory.mktemp("scale-out")
    create_topics(settings)
    procs = FaultProcs(settings, root)
    reader = LagReader(settings)
    try:
        ports = start_workers(procs, root)

        def both_split() -> bool:
            """Each group split in two and every worker recovered (see bench.scale_out)."""
            procs.alive()
            return all(
                split_in_two(assignment(reader, settings, g), settings.topic_partitions)
                for g in SPLIT_TOPIC
            ) and all(recovered(procs.log(name)) for name in WORKERS)

        join_s = wait_for("2 + 2 workers to own partitions", both_split, timeout_s=180)
        before = {g: assignment(reader, settings, g) for g in SPLIT_TOPIC}
        topics = [settings.topic(t) for t in LIVE_TOPICS]

        def lockstep() -> None:
            procs.alive()
            assert reader.wait_drained(reader.groups(), topics, timeout_s=60), "drain timed out"

        replay = replay_file(settings, traffic, speed=0.0, lockstep=lockstep)
        wait_drained(settings, procs)
        after = {g: assignment(reader, settings, g) for g in SPLIT_TOPIC}
        counters = {
            name: {
                metric: scrape(ports[name], metric)
                for metric in (PIPELINE_COUNTERS if group == "pipeline" else (FM_COUNTER,))
            }
            for name, (group, _) in WORKERS.items()
        }
        yield {
            "settings": settings,
            "traffic_path": traffic,
            "replay": replay,
            "join_s": join_s,
            "before": before,
            "after": after,
            "counters": counters,
            "values": live_values(settings),
        }
    finally:
        reader.close()
        procs.stop_all()


def test_each_group_is_split_over_two_workers_for_the_whole_replay(
    scale_run: dict[str, Any],
) -> None:
    before, after = scale_run["before"], scale_run["after"]
    print(f"joined in {scale_run['join_s']:.1f} s; assignment {before}")
    for group in SPLIT_TOPIC:
        assert split_in_two(before[group], 4), f"{group}: {before[group]}"
        assert after[group] == before[group], f"{group} rebalanced during the replay: {after}"


def test_every_worker_processed_messages(scale_run: dict[str, Any]) -> None:
    counters, values = scale_run["counters"], scale_run["values"]
    print(f"per-worker counters: {counters}")
    for name, got in counters.items():
        for metric, value in got.items():
            assert value is not None and value > 0, f"{name} did no work: {metric} = {value}"
    embedded = sum(c[FM_COUNTER] for c in counters.values() if FM_COUNTER in c)
    verified = sum(c[PIPELINE_COUNTERS[0]] for c in counters.values() if PIPELINE_COUNTERS[0] in c)
    assert embedded == verified == len(values.histories)


def test_values_equal_simulator_byte_for_byte(scale_run: dict[str, Any], bundle: Path) -> None:
    from models.data.traffic import read_traffic
    from tests.integration.value_parity import compare_vectors, simulated_for

    settings: Settings = scale_run["settings"]
    offline = simulated_for(settings, bundle, read_traffic(scale_run["traffic_path"]))
    live = scale_run["values"]
    assert scale_run["replay"].requests > 0
    assert live.histories == offline.histories
    assert len(offline.histories) >= 50
    for name, got, want in (
        ("pairs", live.pairs, offline.pairs),
        ("aggregates", live.aggregates, offline.aggregates),
    ):
        diff = compare_vectors(got, want)
        print(f"{name}: {len(want)} keys, {diff.equal_bytes} byte-identical")
        assert not diff.only_left and not diff.only_right, (
            f"{name}: {len(diff.only_left)} only live, {len(diff.only_right)} only simulated"
        )
        assert diff.equal_bytes == len(want), (
            f"{name}: {len(want) - diff.equal_bytes} differ (headers {diff.header_mismatch[:3]}, "
            f"max |d| {diff.max_abs_delta})"
        )
        assert len(want) >= 5


def test_bench_scale_out_smoke_through_the_cli(tmp_path: Path) -> None:
    """``solaris bench scale-out --smoke`` runs both deployments and every worker did work
    (timings mean nothing at smoke size)."""
    import json

    from typer.testing import CliRunner

    from bench.common import validate_shape
    from streams.cli.main import app

    require_kafka_and_redis(Settings())
    out = tmp_path / "scale-out.json"
    result = CliRunner().invoke(app, ["bench", "scale-out", "--smoke", "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    validate_shape(doc)
    assert doc["bench"] == "scale-out" and doc["smoke"] is True
    assert "two_over_one_workers" in doc["ratios"]
    runs = doc["results"]["deployments"]
    assert [r["workers_per_group"] for r in runs] == [1, 2]
    for r in runs:
        assert r["events"] > 0 and r["events_per_s"] > 0
        assert len(r["work_per_worker"]) == 2 * r["workers_per_group"]
        assert all(v and v > 0 for v in r["work_per_worker"].values()), r["work_per_worker"]
    assert "| pipeline + FM workers |" in result.output
