"""``serve``: the ranker's read (``FeatureReader.lookup``) against its floor and a naive reader.

For one user × n candidates (n in {100, 500}), d = 64, with the tier mix of
:mod:`bench.serve_data`, three ways of getting the same answer are timed *interleaved* (per scheduled
call, each method once, in a random order) so they share the machine's noise:

* **reader** — ``FeatureReader.lookup`` on ``RedisStore``: key building, one ``MGET`` (two for
  users served from neighbours, unless the reader's neighbour hint for that user holds: see
  ``FeatureReader._fill``), vectorised decode, freshness and tier rules.
* **floor** — exactly the keys the reader fetched for that call, prebuilt, in one pipelined round
  trip with the plain redis client and no decoding: what the network and Redis alone cost.
* **naive** — one ``GET`` per key and one decode per value (:class:`bench.serve_data.NaiveReader`),
  on every other call by default (its hundreds of round trips would otherwise dominate the run
  time; only its p50 is compared).

The per-profile split of the reader's latency (``by_profile_ms``) shows where its tail comes from:
users served from neighbours need a second round trip.

Ratios: ``p99_reader_over_floor_<n>`` (target ≤ 1.5 at 500) and ``p50_naive_over_reader_<n>``
(target ≥ 5 at 500).
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np
import redis

from bench.common import (
    BenchResult,
    Target,
    delete_keys,
    machine_info,
    percentiles_ms,
    ratio,
    redis_version,
    run_id,
)
from bench.serve_data import (
    MODEL_VERSION,
    PROFILES,
    REQUEST_T,
    BenchUser,
    NaiveReader,
    RecordingStore,
    as_feature_store,
    populate,
)
from store.keys import KeyLayout
from store.reader import FeatureReader
from store.redis_store import RedisStore
from store.tiers import TIER_NAMES
from streams.engine.config import reader_config
from streams.settings import Settings

TARGETS = {
    "p99_reader_over_floor_500": Target(1.5, upper=True),
    "p50_naive_over_reader_500": Target(5.0, upper=False),
}
METHODS = ("reader", "floor", "naive")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Sizes and counts; :meth:`smoke` is the seconds-long variant the test suite runs."""

    sizes: tuple[int, ...] = (100, 500)
    calls: int = 5_000  #: measured calls per size and method
    warmup: int = 300  #: unmeasured iterations per size first
    dim: int = 64
    users_per_profile: int = 16
    seed: int = 3
    #: the naive reader runs on every n-th call only (its 500 round trips dominate the run
    #: time, and only its p50 is compared); reader and floor run on every call
    naive_every: int = 2

    @classmethod
    def smoke(cls) -> ServeConfig:
        return cls(sizes=(20, 50), calls=30, warmup=5, users_per_profile=2, naive_every=1)


@dataclass(frozen=True, slots=True)
class Call:
    """One prepared request: the reader's arguments and the floor's recorded key lists."""

    size: int
    user: int
    profile: str
    items: list[int]
    rounds: list[list[bytes]]
    value_bytes: int


def _floor_fn(client: redis.Redis) -> Callable[[list[list[bytes]]], list[bytes | None]]:
    """One round trip for all of a call's keys: ``MGET``, or a pipeline of ``MGET`` s."""

    def floor(rounds: list[list[bytes]]) -> list[bytes | None]:
        if len(rounds) == 1:
            return cast(list[bytes | None], client.mget(rounds[0]))
        pipe = client.pipeline(transaction=False)
        for keys in rounds:
            pipe.mget(keys)
        return [v for values in pipe.execute() for v in values]

    return floor


def _prepare(
    users: list[BenchUser],
    sizes: tuple[int, ...],
    reader: FeatureReader,
    recording: RecordingStore,
    naive: NaiveReader,
    floor: Callable[[list[list[bytes]]], list[bytes | None]],
) -> tuple[dict[tuple[int, int], Call], bool]:
    """Record each (user, size)'s keys and bytes; check that naive serves the reader's tiers."""
    calls: dict[tuple[int, int], Call] = {}
    agree = True
    for n in sizes:
        for u in users:
            items = list(u.candidates[:n])
            recording.reads.clear()
            got = reader.lookup(u.user_id, items, REQUEST_T)
            rounds = [list(keys) for keys in recording.reads]
            size = sum(len(v) for v in floor(rounds) if v is not None)
            calls[(n, u.user_id)] = Call(n, u.user_id, u.profile.name, items, rounds, size)
            _, naive_tiers = naive.lookup(u.user_id, items, REQUEST_T)
            agree &= bool(np.array_equal(got.tiers, naive_tiers))
    return calls, agree


def _schedule(
    users: list[BenchUser], sizes: tuple[int, ...], count: int, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """``count`` calls per size: users drawn by profile weight, sizes shuffled together."""
    weights = np.array([u.profile.weight for u in users])
    weights /= weights.sum()
    out = [
        (n, int(users[i].user_id)) for n in sizes for i in rng.choice(len(users), count, p=weights)
    ]
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def _measure(
    schedule: list[tuple[int, int]],
    calls: dict[tuple[int, int], Call],
    reader: FeatureReader,
    naive: NaiveReader,
    floor: Callable[[list[list[bytes]]], list[bytes | None]],
    naive_every: int,
) -> dict[int, dict[str, list[float]]]:
    """Run the methods once per scheduled call (naive on every ``naive_every``-th); seconds.

    The order is a fresh random permutation per call, so that no method systematically runs
    right after the naive reader, whose hundreds of round trips leave caches cold.
    """
    samples: dict[int, dict[str, list[float]]] = {}
    clock = time.perf_counter
    rng = random.Random(len(schedule))
    for k, key in enumerate(schedule):
        call = calls[key]
        times = samples.setdefault(call.size, {m: [] for m in (*METHODS, "calls")})
        times["calls"].append(k)  # index into the schedule, to group samples by profile
        for method in rng.sample(METHODS, len(METHODS)):
            if method == "naive" and k % naive_every:
                continue
            if method == "reader":
                t0 = clock()
                reader.lookup(call.user, call.items, REQUEST_T)
                times["reader"].append(clock() - t0)
            elif method == "floor":
                t0 = clock()
                floor(call.rounds)
                times["floor"].append(clock() - t0)
            else:
                t0 = clock()
                naive.lookup(call.user, call.items, REQUEST_T)
                times["naive"].append(clock() - t0)
    return samples


def _by_profile(samples: dict[str, list[float]], measured: list[Call]) -> dict[str, Any]:
    """Reader and floor p50/p99 per user profile (where the reader's tail comes from)."""
    names = np.array([c.profile for c in measured])
    out: dict[str, Any] = {}
    for profile in PROFILES:
        mask = names == profile.name
        out[profile.name] = {
            m: {
                k: v for k, v in percentiles_ms(np.asarray(samples[m])[mask]).items() if k != "p999"
            }
            for m in ("reader", "floor")
        }
    return out


def run_serve(
    settings: Settings, cfg: ServeConfig | None = None, smoke: bool = False
) -> BenchResult:
    """Populate Redis under a unique key prefix, measure, delete the keys; never leaves data."""
    cfg = cfg or (ServeConfig.smoke() if smoke else ServeConfig())
    prefix = run_id("bs")
    layout = KeyLayout(prefix)
    store = RedisStore(settings.store_url, layout)
    floor_client = redis.Redis.from_url(settings.store_url)
    naive_client = redis.Redis.from_url(settings.store_url)
    machine = machine_info({"redis": redis_version(settings.store_url)})
    try:
        started = time.perf_counter()
        users = populate(store, cfg.dim, cfg.users_per_profile, max(cfg.sizes), cfg.seed)
        rcfg = reader_config(settings, cfg.dim, MODEL_VERSION)  # gated, as the ranker reads
        recording = RecordingStore(store)
        reader = FeatureReader(as_feature_store(recording), rcfg)
        naive = NaiveReader(naive_client, layout, rcfg)
        floor = _floor_fn(floor_client)
        calls, agree = _prepare(users, cfg.sizes, reader, recording, naive, floor)
        # The reader no longer needs recording: measure it on the bare store, as the ranker runs.
        reader = FeatureReader(store, rcfg)
        rng = np.random.default_rng(cfg.seed)
        warmup = _schedule(users, cfg.sizes, cfg.warmup, rng)
        _measure(warmup, calls, reader, naive, floor, cfg.naive_every)
        reader = FeatureReader(store, rcfg)  # fresh counters: the mix of the measured calls only
        gc.collect()
        t0 = time.perf_counter()
        schedule = _schedule(users, cfg.sizes, cfg.calls, rng)
        samples = _measure(schedule, calls, reader, naive, floor, cfg.naive_every)
        measured_s = time.perf_counter() - t0
    finally:
        floor_client.close()
        naive_client.close()
        store.close()
        delete_keys(settings.store_url, prefix)
    results: dict[str, object] = {
        "dim": cfg.dim,
        "key_prefix": prefix,
        "calls_per_size": cfg.calls,
        "naive_every": cfg.naive_every,
        "warmup_per_size": cfg.warmup,
        "profiles": [asdict(p) for p in PROFILES],
        "tier_mix": dict(
            zip(
                TIER_NAMES,
                (reader.stats.tiers / max(reader.stats.lookups, 1)).tolist(),
                strict=True,
            )
        ),
        "reader_timeouts": reader.stats.timeouts,
        # measured calls (both sizes): neighbour hints let repeat lapsed users skip round 2
        "reader_round_trips_per_call_measured": reader.stats.round_trips
        / max(reader.stats.calls, 1),
        "reader_hinted_neighbour_reads": reader.stats.hinted_neighbour_reads,
        "reader_store_errors": reader.stats.store_errors,
        "naive_serves_same_tiers": agree,
        "read_deadline_ms": settings.read_deadline_ms,
        "seconds": {"total": time.perf_counter() - started, "measured": measured_s},
    }
    ratios: dict[str, float | None] = {}
    for n in cfg.sizes:
        pct = {m: percentiles_ms(samples[n][m]) for m in METHODS}
        measured = [calls[schedule[int(k)]] for k in samples[n]["calls"]]
        results[f"n{n}"] = {
            "latency_ms": pct,
            "keys_per_call_mean": float(np.mean([sum(map(len, c.rounds)) for c in measured])),
            "value_bytes_per_call_mean": float(np.mean([c.value_bytes for c in measured])),
            # of a first lookup (no neighbour hint yet): what the floor fetches
            "reader_round_trips_per_call_mean": float(np.mean([len(c.rounds) for c in measured])),
            "by_profile_ms": _by_profile(samples[n], measured),
        }
        ratios[f"p99_reader_over_floor_{n}"] = ratio(pct["reader"]["p99"], pct["floor"]["p99"])
        ratios[f"p50_reader_over_floor_{n}"] = ratio(pct["reader"]["p50"], pct["floor"]["p50"])
        ratios[f"p50_naive_over_reader_{n}"] = ratio(pct["naive"]["p50"], pct["reader"]["p50"])
    return BenchResult("serve", machine, results, ratios, TARGETS if not smoke else {}, smoke)


def serve_table(res: BenchResult) -> list[list[str]]:
    """Rows ``size | method | p50 | p99 | p999 | keys | bytes`` for the printed table."""
    rows = []
    for key, value in res.results.items():
        if not key.startswith("n") or not isinstance(value, dict) or "latency_ms" not in value:
            continue
        for method in METHODS:
            p = value["latency_ms"][method]
            rows.append(
                [
                    key[1:],
                    method,
                    f"{p['p50']:.3f}",
                    f"{p['p99']:.3f}",
                    f"{p['p999']:.3f}",
                    f"{value['keys_per_call_mean']:.0f}",
                    f"{value['value_bytes_per_call_mean']:.0f}",
                ]
            )
    return rows
