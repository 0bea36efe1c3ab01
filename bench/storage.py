"""``store``: Redis memory per stored pair embedding for the chosen encoding, JSON, and options.

Measured on a private, empty ``redis-server`` (same binary and flags as ``infra/redis.sh``, on a
free port, stopped at the end) so that (a) keys use the production prefix and realistic ids
(7-digit users and items), hence realistic key lengths, and (b) the ``used_memory`` delta per pair
is not disturbed by other users of the shared Redis. Two numbers per layout:

* ``memory_usage`` — mean of ``MEMORY USAGE key SAMPLES 0`` over a sample: key + value + object
  and dict-entry overhead (the ratio ``bytes_per_pair``, target ≤ 200 at d = 64);
* ``used_memory_delta`` — growth of ``INFO memory used_memory`` per pair: adds the expires-dict
  entry of the TTL and the hash-table buckets, i.e. what 1 M pairs really cost.

Alternatives are measured the same way (never written by the store; a proposal only): int8
values, a shorter key layout, a smaller value header, and one Redis hash per user.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis

from bench.common import BenchResult, Target, free_port, machine_info, ratio, run_id
from schemas.records import PairEmbedding
from store.conditional_writes import write_newer_many
from store.keys import KeyLayout
from store.redis_writes import set_px_many
from store.values import encode_pair, version_tag
from streams.settings import Settings

TARGETS = {"bytes_per_pair": Target(200.0, upper=True)}
MODEL_VERSION = "bench-fm-2024-01"
TTL_MS = 4 * 3_600_000


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """How many pairs are written per layout and how many keys ``MEMORY USAGE`` samples."""

    pairs: int = 20_000
    sample: int = 2_000
    dim: int = 64
    pairs_per_user: int = 50  #: for the hash-per-user option (≈ live pairs of an active user)

    @classmethod
    def smoke(cls) -> StoreConfig:
        return cls(pairs=200, sample=50, pairs_per_user=20)


@contextmanager
def private_redis(fallback_url: str) -> Iterator[tuple[str, bool]]:
    """``(url, private)``: a fresh redis-server on a free port, or the shared one if none exists."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield fallback_url, False
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="solaris-bench-redis-") as tmp:
        flags = {"bind": "127.0.0.1", "port": str(port), "save": "", "appendonly": "no"}
        flags.update(dir=tmp, loglevel="warning")  # infra/redis.sh's flags, minus daemonizing
        args = [binary, *(x for k, v in flags.items() for x in (f"--{k}", v))]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            client = redis.Redis.from_url(url, socket_timeout=1.0)
            for _ in range(100):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            client.close()
            yield url, True
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass(frozen=True, slots=True)
class Pair:
    user: int
    item: int
    t: int
    vector: np.ndarray  #: float32 [dim]


def _pairs(n: int, dim: int, per_user: int, seed: int = 5) -> list[Pair]:
    rng = np.random.default_rng(seed)
    users = rng.integers(1_000_000, 2_000_000, max(1, n // per_user))
    out = []
    for k in range(n):
        vec = rng.normal(0, 0.3, dim).astype(np.float32)
        item = int(rng.integers(1_000_000, 5_000_000))
        out.append(Pair(int(users[k % len(users)]), item, 1_704_067_200_000 + k, vec))
    return out


def _binary(p: Pair) -> bytes:
    return encode_pair(PairEmbedding.from_array(p.user, p.item, p.t, MODEL_VERSION, p.vector))


def _json(p: Pair) -> bytes:
    tag = version_tag(MODEL_VERSION)
    return json.dumps({"t": p.t, "tag": tag, "vec": p.vector.tolist()}).encode()


def _int8(p: Pair) -> bytes:
    """16-byte header + float32 scale + int8 codes: ~1 % relative error at d = 64."""
    scale = float(np.abs(p.vector).max()) / 127 or 1.0
    codes = np.clip(np.round(p.vector / scale), -127, 127).astype(np.int8)
    return _binary(p)[:16] + np.float32(scale).tobytes() + codes.tobytes()


def _short_key(p: Pair) -> bytes:
    """Same hash tag, no separators: ``s{<user>}<item>`` (what a 1-char prefix layout gives)."""
    return f"s{{{p.user}}}{p.item}".encode()


Layout = tuple[Callable[[Pair], bytes], Callable[[Pair], bytes]]


def _measure_keys(
    client: redis.Redis, pairs: list[Pair], layout: Layout, sample: int, flush: bool
) -> dict[str, Any]:
    key_of, value_of = layout
    base = int(client.info("memory")["used_memory"])
    pipe = client.pipeline(transaction=False)
    keys = []
    for p in pairs:
        key = key_of(p)
        keys.append(key)
        pipe.set(key, value_of(p), px=TTL_MS)
        if len(pipe) >= 2_000:
            pipe.execute()
    pipe.execute()
    delta = int(client.info("memory")["used_memory"]) - base
    picked = keys[:: max(1, len(keys) // sample)][:sample]
    for key in picked:
        pipe.memory_usage(key, samples=0)
    usage = [int(u) for u in pipe.execute()]
    out = {
        "memory_usage": float(np.mean(usage)),
        "used_memory_delta": delta / len(pairs) if flush else None,
        "key_bytes": float(np.mean([len(k) for k in picked])),
        "value_bytes": float(np.mean([len(value_of(p)) for p in pairs[: len(picked)]])),
    }
    if flush:
        client.flushdb()
    else:
        client.delete(*keys)
    return out


def _header8(p: Pair) -> bytes:
    """A hypothetical 8-byte header (e.g. 32-bit event seconds + 16-bit tag + dim) + float16."""
    return _binary(p)[8:]


def _measure_hash(
    client: redis.Redis,
    pairs: list[Pair],
    prefix: str,
    flush: bool,
    value_of: Callable[[Pair], bytes] = _binary,
    listpack: bool = False,
) -> dict[str, Any]:
    """One hash per user (field = item id, value = the pair value), PEXPIRE per user.

    ``listpack`` raises ``hash-max-listpack-value``/``-entries`` for this measurement (private
    server only) so small hashes use Redis' compact encoding (linear-time field lookup).
    """
    saved = client.config_get("hash-max-listpack-*")
    if listpack:
        client.config_set("hash-max-listpack-value", 256)
        client.config_set("hash-max-listpack-entries", 256)
    base = int(client.info("memory")["used_memory"])
    by_user: dict[int, list[Pair]] = {}
    for p in pairs:
        by_user.setdefault(p.user, []).append(p)
    pipe = client.pipeline(transaction=False)
    for user, ps in by_user.items():
        key = f"{prefix}:{{u{user}}}:p".encode()
        pipe.hset(key, mapping={str(p.item).encode(): value_of(p) for p in ps})
        pipe.pexpire(key, TTL_MS)
    pipe.execute()
    delta = int(client.info("memory")["used_memory"]) - base
    keys = [f"{prefix}:{{u{u}}}:p".encode() for u in by_user]
    for key in keys:
        pipe.memory_usage(key, samples=0)
    usage = sum(int(u) for u in pipe.execute())
    out = {
        "memory_usage": usage / len(pairs),
        "used_memory_delta": delta / len(pairs) if flush else None,
        "pairs_per_user": len(pairs) / len(by_user),
        "encoding": client.object("encoding", keys[0]).decode(),  # type: ignore[union-attr]
    }
    if flush:
        client.flushdb()
    else:
        client.delete(*keys)
    for name, value in saved.items():
        if value is not None:
            client.config_set(str(name), value)
    return out


def _redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _write_cost(
    client: redis.Redis, pairs: list[Pair], lay: KeyLayout, rounds: int = 6, batch: int = 512
) -> dict[str, Any]:
    """Plain ``SET PX`` batches vs the compare-and-set script (store.conditional_writes) on the
    same keys, alternating rounds (a noisy machine slows both alike): client wall µs per key
    and Redis CPU µs per key. The conditional rounds write (equal event times), so both do the
    same writes; the difference is the script."""
    items = [(lay.pair(p.user, p.item), _binary(p)) for p in pairs[: batch * 8]]
    chunks = [items[i : i + batch] for i in range(0, len(items), batch)]
    spent = {"set": [0.0, 0.0], "conditional": [0.0, 0.0]}  # wall s, redis cpu s
    writers = {
        "set": lambda chunk: set_px_many(client, chunk, 3_600_000),
        "conditional": lambda chunk: write_newer_many(client, chunk, 3_600_000),
    }
    writers["conditional"](chunks[0][:1])  # load the script outside the timing
    for _ in range(rounds):
        for name, write in writers.items():
            cpu0, t0 = _redis_cpu_s(client), time.perf_counter()
            for chunk in chunks:
                write(chunk)
            spent[name][0] += time.perf_counter() - t0
            spent[name][1] += _redis_cpu_s(client) - cpu0
    keys = rounds * len(items)
    client.delete(*[k for k, _ in items])
    return {
        name: {"wall_us_per_key": w * 1e6 / keys, "redis_cpu_us_per_key": c * 1e6 / keys}
        for name, (w, c) in spent.items()
    } | {"keys_per_round": len(items), "rounds": rounds, "batch": batch}


def run_store(
    settings: Settings, cfg: StoreConfig | None = None, smoke: bool = False
) -> BenchResult:
    """Write each layout's pairs to a private Redis, read its memory accounting, clean up."""
    cfg = cfg or (StoreConfig.smoke() if smoke else StoreConfig())
    pairs = _pairs(cfg.pairs, cfg.dim, cfg.pairs_per_user)
    with private_redis(settings.store_url) as (url, private):
        prefix = settings.key_prefix if private else run_id("bst")
        client = redis.Redis.from_url(url, socket_timeout=30.0)
        machine = machine_info({"redis": str(client.info("server").get("redis_version"))})
        lay = KeyLayout(prefix)

        def key(p: Pair) -> bytes:
            return lay.pair(p.user, p.item)

        try:
            layouts: dict[str, dict[str, Any]] = {
                "binary_f16": _measure_keys(client, pairs, (key, _binary), cfg.sample, private),
                "json_f32": _measure_keys(client, pairs, (key, _json), cfg.sample, private),
                "int8": _measure_keys(client, pairs, (key, _int8), cfg.sample, private),
                "short_key": _measure_keys(
                    client, pairs, (_short_key, _binary), cfg.sample, private
                ),
                "short_key_int8": _measure_keys(
                    client, pairs, (_short_key, _int8), cfg.sample, private
                ),
                "header8": _measure_keys(client, pairs, (key, _header8), cfg.sample, private),
                "hash_per_user": _measure_hash(client, pairs, prefix, private),
            }
            write_cost = _write_cost(client, pairs, lay)
            if private:  # changes server config: never on the shared Redis
                layouts["hash_listpack"] = _measure_hash(client, pairs, prefix, True, listpack=True)
                layouts["hash_listpack_int8"] = _measure_hash(
                    client, pairs, prefix, True, _int8, listpack=True
                )
        finally:
            client.close()
    chosen = layouts["binary_f16"]
    results: dict[str, Any] = {
        "dim": cfg.dim,
        "pairs_written": cfg.pairs,
        "memory_usage_sample": cfg.sample,
        "private_redis": private,
        "key_prefix": prefix,
        "layouts": layouts,
        "write_cost": write_cost,
        "per_million_pairs_mib": {
            name: {
                "memory_usage": m["memory_usage"] * 1e6 / 2**20,
                "used_memory_delta": (m["used_memory_delta"] or 0) * 1e6 / 2**20 or None,
            }
            for name, m in layouts.items()
        },
    }
    ratios: dict[str, float | None] = {
        "bytes_per_pair": chosen["memory_usage"],
        "bytes_per_pair_with_ttl_and_dict": chosen["used_memory_delta"],
        "json_over_binary": ratio(layouts["json_f32"]["memory_usage"], chosen["memory_usage"]),
        # issue 24 item 7: what never overwriting a newer value costs per written pair
        "conditional_over_set_write_wall": ratio(
            write_cost["conditional"]["wall_us_per_key"], write_cost["set"]["wall_us_per_key"]
        ),
        "conditional_over_set_redis_cpu": ratio(
            write_cost["conditional"]["redis_cpu_us_per_key"],
            write_cost["set"]["redis_cpu_us_per_key"],
        ),
    }
    return BenchResult("store", machine, results, ratios, TARGETS if not smoke else {}, smoke)


def store_table(res: BenchResult) -> list[list[str]]:
    """Rows ``layout | key B | value B | MEMORY USAGE B | used_memory B | MiB per 1 M``."""
    rows = []
    for name, m in res.results["layouts"].items():
        delta = m.get("used_memory_delta")
        rows.append(
            [
                name,
                f"{m.get('key_bytes', 0):.0f}" if "key_bytes" in m else "-",
                f"{m.get('value_bytes', 0):.0f}" if "value_bytes" in m else "-",
                f"{m['memory_usage']:.0f}",
                "n/a" if delta is None else f"{delta:.0f}",
                f"{m['memory_usage'] * 1e6 / 2**20:.0f}",
            ]
        )
    return rows
