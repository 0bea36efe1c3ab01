"""``memory``: do the workers' resident sets stay flat over a long replay? (issue 24)

A 2-hour-of-event-time synthetic replay with 10× the demo's users (6,000) goes through one live
deployment (pipeline worker + FM worker, real Kafka and Redis) at a fixed paced rate, below what
the pipeline sustains, so memory is measured with the backlog bounded. Each worker's resident set
(``VmRSS`` of the worker and its live descendants, from ``/proc``) is sampled every second next
to how many events the replay had sent.

The users are 12× as active as the calibrated default (24 sessions a day instead of 2), so the
two hours carry ~2 sessions per user and enough events (~250 k) for a trend to show. What the
numbers can tell: a leak per event (a structure that grows with every request or pair) shows as
a slope over the second half of the run, when most users have been seen; state per user is
bounded by the user count here, since nothing in two hours of event time is old enough to expire
(pair TTL 4 h, aggregate window 24 h).

The users keep arriving: ~75 % have been seen by half time, so the second half adds per-user
state that is not a leak. ``--population closed`` replays the same file without the users first
seen in the second half (their every event dropped): no new user after half time, so any
second-half growth is per event. Both report the users seen at half and at the end.

Within two hours nothing expires at the default lifetimes, so each active user's ledger,
aggregate buckets and redelivery memory grow with their events, legitimately: "flat" cannot be
told from "still filling". ``--lifetimes short`` runs the same replay with every event-time
lifetime (pair TTL, refresh-after, aggregate window and TTL, neighbour horizon, table expiry
grace) cut to an eighth of the traffic's span and the table sweep every 15 s of wall time
(:func:`short_lifetime_env`), so each value is dead and swept before half time: the second half
is steady state and any growth in it is a leak.

Reported per worker: RSS after warm-up (10 % of events), at half, at the end and its maximum,
the least-squares slope over the second half in MiB per 100 k events, and the CPU µs per event
over the whole replay (``/proc/<pid>/stat``), so a memory setting's CPU price shows beside it. The ratio
``rss_end_over_half_<worker>`` has the target ≤ 1.05: "flat" means the second half grew the
resident set by at most 5 %.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BenchResult, Target, machine_info, redis_version
from bench.cpu import CpuMeter, child_pids
from bench.live import PIPELINE_ROLES, LiveRun
from bench.pipeline import GROUP_TOPICS, drain_seconds, paced
from bench.workload import TrafficSpec, bench_bundle, bench_traffic
from models.data.traffic import read_traffic
from schemas.records import ImpressionEvent, RequestEvent
from streams.replay import replay_events
from streams.settings import Settings

HOUR_DAYS = 1 / 24
#: 10× the demo's 600 users over 2 hours of event time, 12× as active as the calibrated default
FULL_SPEC = TrafficSpec(6_000, 2 * HOUR_DAYS, seed=13, sessions_per_day=24.0)
SMOKE_SPEC = TrafficSpec(60, 2 * HOUR_DAYS, seed=13, sessions_per_day=6.0)
WORKERS = ("pipeline", "fm")
FLAT_LIMIT = 1.05
TrafficEvent = RequestEvent | ImpressionEvent


POPULATIONS = ("open", "closed")
LIFETIMES = ("default", "short")
#: wall-clock interval of the table sweep with short lifetimes (the 2-hour replay takes ~400 s)
SHORT_SWEEP_INTERVAL_S = 15.0


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    rate: float = 700.0  #: events/s of the paced replay (below the sustained rate)
    sample_s: float = 1.0
    drain_timeout_s: float = 300.0
    spec: TrafficSpec = FULL_SPEC
    #: "closed": without the users first seen in the traffic's second half (see the docstring)
    population: str = "open"
    #: "short": every event-time lifetime an eighth of the traffic's span (see the docstring)
    lifetimes: str = "default"

    @classmethod
    def smoke(cls) -> MemoryConfig:
        return cls(rate=200.0, sample_s=0.25, spec=SMOKE_SPEC)


def rss_bytes(pid: int) -> int | None:
    """Resident set of ``pid`` and its live descendants (None once ``pid`` is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    own = next(
        (int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")),
        0,
    )
    return own + sum(rss_bytes(child) or 0 for child in child_pids(pid))


class RssSampler:
    """Samples each worker's RSS with the replay's progress in a background thread."""

    def __init__(self, pids: dict[str, int], interval_s: float) -> None:
        self.pids, self.interval_s = pids, interval_s
        self.sent = 0  #: events the replay has sent so far (written by the replay loop)
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self) -> None:
        row: dict[str, Any] = {"t": time.perf_counter(), "events": self.sent}
        row.update({name: rss_bytes(pid) for name, pid in self.pids.items()})
        self.samples.append(row)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


def summarise(samples: list[dict[str, Any]], worker: str, total_events: int) -> dict[str, Any]:
    """RSS of ``worker`` after warm-up, at half, at the end, its max and its second-half slope.

    A sample belongs to the point in the replay given by the events sent when it was taken; the
    end is the last sample (taken after the backlog drained).
    """
    rows = [(s["events"], s[worker]) for s in samples if s.get(worker) is not None]
    if not rows or total_events <= 0:
        return {"samples": len(rows)}
    mib = 2.0**20

    def at(share: float) -> float:
        return next((r for e, r in rows if e >= share * total_events), rows[-1][1]) / mib

    half = [(e, r) for e, r in rows if e >= total_events / 2]
    slope = None
    if len(half) >= 4 and half[-1][0] > half[0][0]:
        x = np.array([e for e, _ in half], np.float64)
        y = np.array([r for _, r in half], np.float64) / mib
        slope = float(np.polyfit(x, y, 1)[0]) * 100_000
    end = rows[-1][1] / mib
    return {
        "samples": len(rows),
        "rss_mib_warm": at(0.1),
        "rss_mib_half": at(0.5),
        "rss_mib_end": end,
        "rss_mib_max": max(r for _, r in rows) / mib,
        "slope_mib_per_100k_events": slope,
        "end_over_half": end / at(0.5),
    }


def closed_population(events: list[TrafficEvent]) -> list[TrafficEvent]:
    """``events`` without every event of the users whose first event is in the second half."""
    first: dict[int, int] = {}
    for i, ev in enumerate(events):
        first.setdefault(ev.user_id, i)
    half = len(events) // 2
    return [ev for ev in events if first[ev.user_id] < half]


def users_seen(events: list[TrafficEvent]) -> dict[str, int]:
    """Distinct users among the first half of ``events`` and among all of them."""
    half = {ev.user_id for ev in events[: len(events) // 2]}
    return {"users_seen_at_half": len(half), "users_seen_at_end": len({e.user_id for e in events})}


def population_traffic(traffic: Path, population: str) -> Path:
    """``traffic`` itself (open) or its closed-population copy beside it (written once)."""
    from models.data.traffic import traffic_metadata, write_traffic

    if population not in POPULATIONS:
        raise ValueError(f"population must be one of {POPULATIONS}, got {population!r}")
    if population == "open":
        return traffic
    path = traffic.with_name(traffic.stem + "-closed.avro")
    if not path.exists():
        kept = closed_population(list(read_traffic(traffic)))
        tmp = path.with_suffix(".tmp")
        meta = traffic_metadata(traffic) | {"population": "closed at half"}
        write_traffic(tmp, kept, meta)
        tmp.replace(path)  # atomic: a concurrent run never reads half a file
    return path


def short_lifetime_env(span_ms: int) -> dict[str, str]:
    """``SOLARIS_*`` overrides that make every event-time lifetime of the workers' state an
    eighth of ``span_ms`` (the in-flight timeout a half of that, the expiry grace a third), so
    a value is dead (:func:`streams.engine.steps.expiry.lifetimes` plus the grace) well before
    half of the replay and the sweep deletes it."""
    life = span_ms // 8
    values = {
        "PAIR_TTL_MS": life,
        "REFRESH_AFTER_MS": life,
        "PAIR_IN_FLIGHT_TIMEOUT_MS": life // 2,
        "AGGREGATE_WINDOW_MS": life,
        "AGGREGATE_BUCKET_MS": life // 6,
        "AGGREGATE_TTL_MS": life,
        "NEIGHBOUR_AGGREGATE_TTL_MS": life,
        "VERIFIER_PAIR_MEMORY_MS": life,
        "TABLE_EXPIRY_GRACE_MS": life // 3,
        "TABLE_SWEEP_INTERVAL_S": SHORT_SWEEP_INTERVAL_S,
    }
    return {f"SOLARIS_{name}": str(value) for name, value in values.items()}


def lifetime_env(lifetimes: str, spec: TrafficSpec) -> dict[str, str]:
    """The workers' environment overrides for ``lifetimes`` ("default": none)."""
    if lifetimes not in LIFETIMES:
        raise ValueError(f"lifetimes must be one of {LIFETIMES}, got {lifetimes!r}")
    if lifetimes == "default":
        return {}
    return short_lifetime_env(int(spec.days * 86_400_000))


def _replay(run: LiveRun, sampler: RssSampler, traffic: Path, rate: float) -> int:
    """The whole traffic file at ``rate`` events/s in one replay; the sampler learns the
    progress (every 1,000 events) and a worker that died stops the run."""

    def progress(sent: int) -> None:
        sampler.sent = sent
        run.children.check()

    events = paced(iter(read_traffic(traffic)), rate, sys.maxsize)
    return replay_events(run.settings, events, progress=progress).messages


def run_memory(
    settings: Settings,
    cfg: MemoryConfig | None = None,
    smoke: bool = False,
    population: str | None = None,
    lifetimes: str | None = None,
) -> BenchResult:
    """The paced 2-hour replay on one deployment with RSS sampled; everything removed after."""
    cfg = cfg or (MemoryConfig.smoke() if smoke else MemoryConfig())
    if population is not None:
        cfg = replace(cfg, population=population)
    if lifetimes is not None:
        cfg = replace(cfg, lifetimes=lifetimes)
    env = lifetime_env(cfg.lifetimes, cfg.spec)
    machine = machine_info({"redis": redis_version(settings.store_url)})
    traffic = population_traffic(bench_traffic(settings, cfg.spec), cfg.population)
    bundle = bench_bundle(settings, traffic, smoke)
    log_dir = settings.cache_dir / "run" / "bench-logs"
    started = time.perf_counter()
    with LiveRun(settings, bundle, log_dir, env=env) as run:
        run.start("pipeline", PIPELINE_ROLES)
        run.start("fm", "embed")
        run.wait_ready(list(GROUP_TOPICS))
        pids = dict(run.children.pids())
        cpu = CpuMeter({w: [pids[w]] for w in WORKERS})  # memory's price next to it
        with RssSampler({w: pids[w] for w in WORKERS}, cfg.sample_s) as sampler:
            sampler.sample()
            cpu_before = cpu.read()
            sent = _replay(run, sampler, traffic, cfg.rate)
            drain_s = drain_seconds(run, cfg.drain_timeout_s)
            cpu_after = cpu.read()
            sampler.sample()
        run.children.check()
        embedded = run.counter("embedded")
    per_worker = {w: summarise(sampler.samples, w, sent) for w in WORKERS}
    results: dict[str, Any] = {
        "traffic": {
            "users": cfg.spec.n_users,
            "event_hours": cfg.spec.days * 24,
            "sessions_per_day": cfg.spec.sessions_per_day,
            "events": sent,
            "population": cfg.population,
            "lifetimes": cfg.lifetimes,
            "lifetime_env": env,
            **users_seen(list(read_traffic(traffic))),
        },
        "rate_events_per_s": cfg.rate,
        "replay_wall_s": time.perf_counter() - started,
        "drained": drain_s is not None,
        "drain_s": drain_s,
        "pairs_embedded": embedded,
        "workers": per_worker,
        # over the whole paced replay and drain: what the table memory settings cost in CPU
        "cpu_us_per_event": CpuMeter.per_event_us(cpu_before, cpu_after, sent),
        "samples": sampler.samples,
    }
    ratios = {f"rss_end_over_half_{w}": per_worker[w].get("end_over_half") for w in WORKERS}
    targets = {k: Target(FLAT_LIMIT, upper=True) for k in ratios}
    return BenchResult("memory", machine, results, ratios, targets, smoke)


def memory_table(res: BenchResult) -> list[list[str]]:
    """Rows ``worker | warm | half | end | max MiB | slope MiB/100k events | end/half | CPU``."""

    def f(value: Any, fmt: str = ".0f") -> str:
        return "n/a" if value is None else format(value, fmt)

    rows = []
    cpu = res.results.get("cpu_us_per_event") or {}
    for worker, s in res.results["workers"].items():
        rows.append(
            [
                worker,
                f(s.get("rss_mib_warm")),
                f(s.get("rss_mib_half")),
                f(s.get("rss_mib_end")),
                f(s.get("rss_mib_max")),
                f(s.get("slope_mib_per_100k_events"), ".2f"),
                f(s.get("end_over_half"), ".3f"),
                f(cpu.get(worker)),
            ]
        )
    return rows
