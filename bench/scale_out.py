"""``scale-out``: events/s of 1 pipeline + 1 FM worker against 2 + 2, on 4 partitions.

Each deployment gets its own prefix (:class:`bench.live.LiveRun`): fresh topics with 4
partitions, N stateful pipeline workers and N FM workers (each with its own cache dir, hence its
own Faust / RocksDB data dir, and its own metrics port). Once every member of both groups owns
partitions, the same first ``events`` events of the benchmark traffic are replayed as fast as the
producer goes (timed, not lockstep). Throughput is ``events / seconds from the first send until
every group has committed every message`` (lag 0 in two consecutive readings; the first of them
ends the clock), so it includes draining the backlog: a sustained rate, not a producer rate.

The ratio ``two_over_one_workers`` comes from one run of both deployments, back to back on the
same machine. On a 2-core host four worker processes plus the producer share the same cores, so
more workers need not be faster; the per-worker counters show that the work really was split.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import BenchResult, free_port, machine_info, ratio, redis_version
from bench.live import PIPELINE_ROLES, LiveRun, scrape
from bench.workload import FULL_TRAFFIC, SMOKE_TRAFFIC, bench_bundle, bench_traffic
from streams.lag import LagReader
from streams.replay import replay_events
from streams.settings import Settings

#: group suffix -> (worker roles, topics the group consumes, topic whose partitions it splits)
GROUPS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "pipeline": (
        PIPELINE_ROLES,
        ("requests", "impressions", "speculated", "embeddings"),
        "requests",
    ),
    "fm": ("embed", ("verified",), "verified"),
}
#: the per-process counter that shows a worker of each group did work
WORK_COUNTER = {"pipeline": "solaris_verified_pairs_total", "fm": "solaris_pairs_embedded_total"}
DAY_MS = 86_400_000
#: Faust's log lines (INFO) around a rebalance: a worker is ready once the last comes after the first
ASSIGNED = "Setting newly assigned partitions"
RECOVERED = "[^---Recovery]: Worker ready"


@dataclass(frozen=True, slots=True)
class ScaleOutConfig:
    """How much traffic each deployment gets; :meth:`smoke` checks the plumbing only."""

    events: int = 40_000
    partitions: int = 4
    worker_counts: tuple[int, ...] = (1, 2)
    join_timeout_s: float = 180.0
    drain_timeout_s: float = 900.0
    poll_s: float = 0.25

    @classmethod
    def smoke(cls) -> ScaleOutConfig:
        return cls(events=600, drain_timeout_s=180.0)


def members(reader: LagReader, group: str, topic: str) -> list[frozenset[int]]:
    """Partitions of ``topic`` each member of a Stable ``group`` owns ([] otherwise)."""
    from confluent_kafka import ConsumerGroupState

    desc = reader.admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    if desc.state != ConsumerGroupState.STABLE:
        return []
    return [
        frozenset(tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic)
        for m in desc.members
        if m.assignment is not None
    ]


def _start_workers(run: LiveRun, n: int) -> dict[str, tuple[str, int]]:
    """Start ``n`` workers per group; returns worker name -> (group, metrics port)."""
    out: dict[str, tuple[str, int]] = {}
    for group, (roles, _, _) in GROUPS.items():
        for k in range(1, n + 1):
            name, port = f"{group}{k}", free_port()
            run.start(name, roles, port, own_state=True)
            out[name] = (group, port)
    return out


def split(run: LiveRun, reader: LagReader) -> list[list[frozenset[int]]]:
    """Per group of :data:`GROUPS`, the partitions each member owns (sorted)."""
    return [
        sorted(members(reader, f"{run.prefix}-{g}", run.settings.topic(t)), key=sorted)
        for g, (_, _, t) in GROUPS.items()
    ]


def recovered(log: str) -> bool:
    """True when a worker's log shows it finished recovery after its latest assignment.

    Traffic that arrives while a worker is still recovering after a rebalance was seen to leave
    its committed offsets behind for good (requests partitions stuck at offset 11 with every
    message processed), so a measurement starts only once every worker is past this point.
    """
    return log.rfind(RECOVERED) > log.rfind(ASSIGNED) >= 0


def wait_split(
    run: LiveRun, reader: LagReader, counts: Mapping[str, int], timeout_s: float
) -> float:
    """Seconds until each group of :data:`GROUPS` has ``counts[group]`` members that all own
    partitions and every worker has recovered its assignment (checked twice, so no rebalance
    slipped in between). The workers must log at INFO (:func:`recovered`)."""
    start = time.perf_counter()
    logs = sorted(run.log_dir.glob("*.log"))
    while time.perf_counter() - start < timeout_s:
        run.children.check()
        now = split(run, reader)
        ready = all(
            len(m) == counts[g] and all(m) for g, m in zip(GROUPS, now, strict=True)
        ) and all(recovered(p.read_text(errors="replace")) for p in logs)
        if ready and split(run, reader) == now:
            return time.perf_counter() - start
        time.sleep(1.0)
    wanted = " + ".join(f"{counts[g]} {g}" for g in GROUPS)
    raise TimeoutError(f"{wanted} workers did not all get partitions within {timeout_s:.0f} s")


def _caught_up(run: LiveRun, reader: LagReader) -> bool:
    """Every group has committed every message of every partition it consumes."""
    for group, (_, topics, _) in GROUPS.items():
        rows = reader.lag([f"{run.prefix}-{group}"], [run.settings.topic(t) for t in topics])
        if not rows or any(r.lag for r in rows):
            return False
    return True


def _drained_at(run: LiveRun, reader: LagReader, cfg: ScaleOutConfig) -> float:
    """perf_counter time of the first of two consecutive lag-0 readings."""
    deadline = time.perf_counter() + cfg.drain_timeout_s
    first: float | None = None
    while time.perf_counter() < deadline:
        run.children.check()
        now = time.perf_counter()
        if _caught_up(run, reader):
            if first is not None:
                return first
            first = now
        else:
            first = None
        time.sleep(cfg.poll_s)
    behind = [
        f"{r.group} {r.topic}[{r.partition}] {r.committed}/{r.end}"
        for g, (_, topics, _) in GROUPS.items()
        for r in reader.lag([f"{run.prefix}-{g}"], [run.settings.topic(t) for t in topics])
        if r.lag
    ]
    raise TimeoutError(f"lag did not reach 0 within {cfg.drain_timeout_s:.0f} s: {behind}")


def _one_deployment(
    settings: Settings, bundle: Path, traffic: Path, n: int, cfg: ScaleOutConfig
) -> dict[str, Any]:
    """Deploy ``n`` + ``n`` workers, replay, wait for lag 0; everything removed afterwards."""
    from models.data.traffic import read_traffic

    env = {
        "SOLARIS_NEIGHBOUR_INTERVAL_MS": str(DAY_MS),  # see bench.pipeline: wall-clock-like cadence
        "SOLARIS_TOPIC_PARTITIONS": str(cfg.partitions),
        "SOLARIS_LOG_LEVEL": "INFO",  # the rebalance lines that :func:`recovered` reads
    }
    with LiveRun(settings, bundle, settings.cache_dir / "run" / "bench-logs", env) as run:
        reader = LagReader(run.settings)
        try:
            workers = _start_workers(run, n)
            join_s = wait_split(run, reader, dict.fromkeys(GROUPS, n), cfg.join_timeout_s)
            before = split(run, reader)
            start = time.perf_counter()
            stats = replay_events(run.settings, itertools.islice(read_traffic(traffic), cfg.events))
            end = _drained_at(run, reader, cfg)
            after = split(run, reader)
            work = {name: scrape(port, WORK_COUNTER[g]) for name, (g, port) in workers.items()}
        finally:
            reader.close()
    wall = end - start
    return {
        "workers_per_group": n,
        "events": stats.messages,
        "requests": stats.requests,
        "replay_s": stats.seconds,
        "first_send_to_lag0_s": wall,
        "events_per_s": stats.messages / wall if wall > 0 else None,
        "join_s": join_s,
        "partitions_per_member": [[sorted(m) for m in g] for g in before],
        "rebalanced_during_run": after != before,
        "work_per_worker": work,
    }


def run_scale_out(
    settings: Settings, cfg: ScaleOutConfig | None = None, smoke: bool = False
) -> BenchResult:
    """Both deployments on the same traffic, one after the other; ratio 2 workers / 1 worker."""
    cfg = cfg or (ScaleOutConfig.smoke() if smoke else ScaleOutConfig())
    settings = settings.model_copy(update={"topic_partitions": cfg.partitions})
    machine = machine_info({"redis": redis_version(settings.store_url)})
    traffic = bench_traffic(settings, SMOKE_TRAFFIC if smoke else FULL_TRAFFIC)
    bundle = bench_bundle(settings, traffic, smoke)
    runs = [_one_deployment(settings, bundle, traffic, n, cfg) for n in cfg.worker_counts]
    by_n = {r["workers_per_group"]: r for r in runs}
    results: dict[str, Any] = {
        "partitions": cfg.partitions,
        "traffic": traffic.name,
        "deployments": runs,
    }
    two_over_one = ratio(by_n.get(2, {}).get("events_per_s"), by_n.get(1, {}).get("events_per_s"))
    return BenchResult(
        "scale-out", machine, results, {"two_over_one_workers": two_over_one}, {}, smoke
    )


def scale_out_table(res: BenchResult) -> list[list[str]]:
    """One row per deployment: workers, events, seconds to lag 0, events/s, work per worker."""
    rows = []
    for r in res.results["deployments"]:
        work = ", ".join(
            f"{name} {'n/a' if v is None else f'{v:.0f}'}"
            for name, v in r["work_per_worker"].items()
        )
        rows.append(
            [
                f"{r['workers_per_group']} + {r['workers_per_group']}",
                f"{r['events']:,}",
                f"{r['replay_s']:.1f}",
                f"{r['first_send_to_lag0_s']:.1f}",
                "n/a" if r["events_per_s"] is None else f"{r['events_per_s']:,.0f}",
                work,
            ]
        )
    return rows
