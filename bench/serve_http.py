"""``serve-http``: the feature server (``solaris serve``) against the in-process reader.

The world of the ``serve`` benchmark (:mod:`bench.serve_data`: active, lapsed and new users, the
VMs' tier mix, d = 64) is written to Redis under a unique key prefix; ``solaris serve`` runs as
a child process on it with the same reader settings; then per scheduled call (a user drawn by
profile weight, n candidates), in a fresh random order, three ways of getting the same answer
are timed *interleaved* so they share the machine's noise:

* **inprocess** — ``FeatureReader.lookup`` in this process (what a Python ranker pays).
* **http_binary** — ``POST /v1/features`` with ``Accept: application/octet-stream`` over one
  kept-alive connection, the answer decoded into numpy arrays (what a remote ranker pays).
* **http_json** — the same with the JSON answer, parsed into numpy arrays.

Both HTTP answers are first checked to equal the in-process one, value for value, for every
(user, n) (``http_serves_same``). The server and this client share the machine's cores: on a
2-core machine the client's decode and the server's encode compete, which is part of the cost.

Ratios: ``http_p99_over_inprocess_p99`` (binary form, the first size), ``http_p50_over_…``
and ``http_json_p99_over_inprocess_p99``. No target: the issue asks for the number.
"""

from __future__ import annotations

import gc
import http.client
import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.common import (
    BenchResult,
    delete_keys,
    machine_info,
    percentiles_ms,
    ratio,
    redis_version,
    run_id,
)
from bench.serve_data import MODEL_VERSION, REQUEST_T, BenchUser, populate
from bench.serve_process import ServerProcess, feature_server
from store.keys import KeyLayout
from store.reader import FeatureReader, Lookup
from store.redis_store import RedisStore
from streams.engine.config import reader_config
from streams.serve.openapi import FEATURES_PATH
from streams.serve.protocol import BINARY_TYPE, JSON_TYPE, decode_binary
from streams.settings import Settings

METHODS = ("inprocess", "http_binary", "http_json")


@dataclass(frozen=True, slots=True)
class ServeHttpConfig:
    """Sizes and counts; :meth:`smoke` is the seconds-long variant the test suite runs."""

    sizes: tuple[int, ...] = (100,)
    calls: int = 2_000  #: measured calls per size (each method once per call)
    warmup: int = 200
    dim: int = 64
    users_per_profile: int = 16
    seed: int = 5
    server_threads: int = 2

    @classmethod
    def smoke(cls) -> ServeHttpConfig:
        return cls(sizes=(20,), calls=30, warmup=5, users_per_profile=2)


class HttpFeatures:
    """A minimal Python client of the server: one kept-alive connection, answers as a Lookup."""

    def __init__(self, url: str, dim: int) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, 10)
        self.dim = dim

    def lookup(self, body: bytes, binary: bool) -> Lookup:
        accept = BINARY_TYPE if binary else JSON_TYPE
        headers = {"Content-Type": JSON_TYPE, "Accept": accept}
        self.conn.request("POST", FEATURES_PATH, body=body, headers=headers)
        res = self.conn.getresponse()
        data = res.read()
        if res.status != 200:
            raise RuntimeError(f"feature server answered {res.status}: {data[:300]!r}")
        if binary:
            return decode_binary(data).lookup
        doc = json.loads(data)
        return Lookup(
            np.asarray(doc["vectors"], np.float32).reshape(-1, self.dim),
            np.asarray(doc["tier_codes"], np.uint8),
            np.asarray(doc["ages_ms"], np.int64),
        )

    def timeouts(self) -> float:
        """The server's count of lookups that hit the read deadline (its /metrics)."""
        self.conn.request("GET", "/metrics")
        text = self.conn.getresponse().read().decode()
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "solaris_serve_reader_timeouts_total"
        )

    def close(self) -> None:
        self.conn.close()


def _same(a: Lookup, b: Lookup) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


#: comparisons of one request at most, when a read ran past its deadline
COMPARE_ATTEMPTS = 3


def agree(reader: Any, http: Any, call: Call) -> tuple[bool, int]:
    """Whether both HTTP forms answer ``call`` as the in-process reader does, and how many
    comparisons were made again. A read that ran past the deadline (counted by the reader here
    or by the server) serves *missing* and says nothing about the values; on a loaded machine
    it happens (seen once in a parallel test run), so that comparison is made again. A value
    difference with no deadline passed is a disagreement at once."""
    _, user, items, body = call
    for attempt in range(COMPARE_ATTEMPTS):
        before = (reader.stats.timeouts, http.timeouts())
        want = reader.lookup(user, items, REQUEST_T)
        if _same(http.lookup(body, True), want) and _same(http.lookup(body, False), want):
            return True, attempt
        if (reader.stats.timeouts, http.timeouts()) == before:
            return False, attempt
    return False, COMPARE_ATTEMPTS - 1


def _server_env(settings: Settings, prefix: str, cfg: ServeHttpConfig) -> dict[str, str]:
    """The child's settings: this run's store and keys, and every reader knob as here."""
    knobs = {
        "store_url": settings.store_url,
        "key_prefix": prefix,
        "embedding_dim": cfg.dim,
        "serve_model_version": MODEL_VERSION,
        "serve_threads": cfg.server_threads,
        "max_candidates": max(max(cfg.sizes), settings.max_candidates),
        "read_deadline_ms": settings.read_deadline_ms,
        "pair_ttl_ms": settings.pair_ttl_ms,
        "aggregate_ttl_ms": settings.aggregate_ttl_ms,
        "neighbour_aggregate_ttl_ms": settings.neighbour_aggregate_ttl_ms,
        "neighbour_ttl_ms": settings.neighbour_ttl_ms,
        "neighbours_k": settings.neighbours_k,
        "reader_max_neighbour_pair_keys": settings.reader_max_neighbour_pair_keys,
        "reader_neighbour_hints": settings.reader_neighbour_hints,
    }
    return {"SOLARIS_STORE_BACKEND": "redis"} | {
        f"SOLARIS_{k.upper()}": str(v) for k, v in knobs.items()
    }


Call = tuple[int, int, list[int], bytes]  #: size, user, items, request body


def _prepare(
    users: list[BenchUser], sizes: tuple[int, ...], reader: FeatureReader, http: HttpFeatures
) -> tuple[dict[tuple[int, int], Call], bool, int]:
    """Every (size, user)'s request; whether both HTTP forms answer what the reader does
    (:func:`agree`), and how many comparisons were made again after a deadline."""
    calls: dict[tuple[int, int], Call] = {}
    same, again = True, 0
    for n in sizes:
        for u in users:
            items = list(u.candidates[:n])
            doc = {"user_id": u.user_id, "item_ids": items, "event_time_ms": REQUEST_T}
            call = calls[(n, u.user_id)] = (n, u.user_id, items, json.dumps(doc).encode())
            ok, retried = agree(reader, http, call)
            same, again = same and ok, again + retried
    return calls, same, again


def _schedule(
    users: list[BenchUser], sizes: tuple[int, ...], count: int, rng: np.random.Generator
) -> list[tuple[int, int]]:
    weights = np.array([u.profile.weight for u in users])
    weights /= weights.sum()
    out = [(n, users[i].user_id) for n in sizes for i in rng.choice(len(users), count, p=weights)]
    return [out[i] for i in rng.permutation(len(out))]


def _measure(
    schedule: list[tuple[int, int]],
    calls: dict[tuple[int, int], Call],
    reader: FeatureReader,
    http: HttpFeatures,
) -> dict[int, dict[str, list[float]]]:
    """Each method once per scheduled call, in a fresh random order; seconds."""
    samples: dict[int, dict[str, list[float]]] = {}
    clock = time.perf_counter
    rng = random.Random(len(schedule))
    for key in schedule:
        n, user, items, body = calls[key]
        times = samples.setdefault(n, {m: [] for m in METHODS})
        for method in rng.sample(METHODS, len(METHODS)):
            t0 = clock()
            if method == "inprocess":
                reader.lookup(user, items, REQUEST_T)
            else:
                http.lookup(body, method == "http_binary")
            times[method].append(clock() - t0)
    return samples


def _server_counters(server: ServerProcess) -> dict[str, float]:
    """The server's request and reader-error counters, from its /metrics."""
    _, body = server.get("/metrics")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        if family.name.startswith("solaris_serve_reader_") or family.name.endswith("requests"):
            for s in family.samples:
                if s.name.endswith("_total"):
                    labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                    out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def _run_against(
    settings: Settings, cfg: ServeHttpConfig, store: RedisStore, prefix: str, log: Path
) -> dict[str, Any]:
    """Populate, start the server, check, measure; the raw results."""
    users = populate(store, cfg.dim, cfg.users_per_profile, max(cfg.sizes), cfg.seed)
    reader = FeatureReader(store, reader_config(settings, cfg.dim, MODEL_VERSION))
    with feature_server(_server_env(settings, prefix, cfg), log) as server:
        http = HttpFeatures(server.url, cfg.dim)
        try:
            calls, same, again = _prepare(users, cfg.sizes, reader, http)
            rng = np.random.default_rng(cfg.seed)
            _measure(_schedule(users, cfg.sizes, cfg.warmup, rng), calls, reader, http)
            reader = FeatureReader(store, reader.config)  # fresh counters for the measured calls
            gc.collect()
            t0 = time.perf_counter()
            samples = _measure(_schedule(users, cfg.sizes, cfg.calls, rng), calls, reader, http)
            measured_s = time.perf_counter() - t0
            counters = _server_counters(server)
        finally:
            http.close()
    return {
        "samples": samples,
        "http_serves_same": same,
        "comparisons_made_again_after_a_deadline": again,
        "measured_s": measured_s,
        "server_counters": counters,
        "inprocess_reader_timeouts": reader.stats.timeouts,
        "server_exit_code": server.returncode,
    }


def run_serve_http(
    settings: Settings, cfg: ServeHttpConfig | None = None, smoke: bool = False
) -> BenchResult:
    """Populate Redis under a unique key prefix, measure, delete the keys; never leaves data."""
    cfg = cfg or (ServeHttpConfig.smoke() if smoke else ServeHttpConfig())
    prefix = run_id("bh")
    store = RedisStore(settings.store_url, KeyLayout(prefix))
    machine = machine_info({"redis": redis_version(settings.store_url)})
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="solaris-serve-http-") as tmp:
            raw = _run_against(settings, cfg, store, prefix, Path(tmp) / "serve.log")
    finally:
        store.close()
        delete_keys(settings.store_url, prefix)
    samples = raw.pop("samples")
    measured_s = raw.pop("measured_s")
    results: dict[str, Any] = {
        "dim": cfg.dim,
        "key_prefix": prefix,
        "calls_per_size": cfg.calls,
        "warmup_per_size": cfg.warmup,
        "server_threads": cfg.server_threads,
        "read_deadline_ms": settings.read_deadline_ms,
        **raw,
        "seconds": {"total": time.perf_counter() - started, "measured": measured_s},
    }
    ratios: dict[str, float | None] = {}
    for k, n in enumerate(cfg.sizes):
        pct = {m: percentiles_ms(samples[n][m]) for m in METHODS}
        results[f"n{n}"] = {"latency_ms": pct}
        suffix = "" if k == 0 else f"_{n}"
        ratios[f"http_p99_over_inprocess_p99{suffix}"] = ratio(
            pct["http_binary"]["p99"], pct["inprocess"]["p99"]
        )
        ratios[f"http_p50_over_inprocess_p50{suffix}"] = ratio(
            pct["http_binary"]["p50"], pct["inprocess"]["p50"]
        )
        ratios[f"http_json_p99_over_inprocess_p99{suffix}"] = ratio(
            pct["http_json"]["p99"], pct["inprocess"]["p99"]
        )
    return BenchResult("serve-http", machine, results, ratios, {}, smoke)


def serve_http_table(res: BenchResult) -> list[list[str]]:
    """Rows ``candidates | method | p50 | p99 | p999 | mean`` for the printed table."""
    rows = []
    for key, value in res.results.items():
        if not key.startswith("n") or not isinstance(value, dict) or "latency_ms" not in value:
            continue
        for method in METHODS:
            p = value["latency_ms"][method]
            rows.append([key[1:], method, *(f"{p[q]:.3f}" for q in ("p50", "p99", "p999", "mean"))])
    return rows
