"""``fm``: FM throughput (pairs/s) bare, inside the engine's ``Embedder``, and in the live worker.

* **bare** — ``onnxruntime.InferenceSession.run`` on prebuilt input tensors of real pairs: the
  floor, nothing but the model.
* **embedder** — the engine's :class:`~streams.engine.embedder.Embedder` on the same pairs
  in-process, as the embed agent runs it: history cuts and vocabulary lookups (``prepare``),
  the ONNX call on a model thread (``run``), ``PairEmbedding`` records and the in-memory store
  write, with the model computing batch k while the caller prepares batch k+1 and stores batch
  k−1 (on 2 cores that overlap is the difference: the model call holds no GIL).
  ``sequential`` does the same steps one after the other and ``embed_only`` skips the store
  write (where the time goes). CPU µs per pair (this process, all threads) next to bare's say
  what the overlap costs. Measured interleaved with bare (the order rotates per round).
* **live** — verified messages of the same pairs replayed into Kafka, then a real
  ``solaris worker --agents embed`` (Faust) embeds them and writes Redis. Its rate is timed from
  the first to the last pair written (the worker's Prometheus counter of pairs written, polled
  every ``FMConfig.poll_s``) and compared with bare measured just before and just after it.

The worker's micro-batch is ``SOLARIS_EMBED_BATCH_SIZE`` = 128 *messages* (one per request), so
a live FM call holds more pairs than 128; the pairs per call are reported, with bare measured at
that size too (``live_over_bare_matched``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Target, free_port, machine_info, ratio, redis_version
from bench.fm_rates import (
    bare_at,
    bare_cpu_us,
    bare_session,
    flatten,
    in_process,
    per_pair_us,
)
from bench.live import LiveRun, scrape
from bench.workload import (
    FULL_TRAFFIC,
    SMOKE_TRAFFIC,
    PairWorkload,
    bench_bundle,
    bench_traffic,
    pair_workload,
)
from streams.settings import Settings

#: Prometheus series of the FM worker (streams.live.metrics): pairs written, FM calls made.
EMBEDDED = "solaris_pairs_embedded_total"
FM_CALLS = "solaris_fm_batch_size_count"
TARGETS = {
    "embedder_over_bare_128": Target(0.9, upper=False),
    "live_over_bare_128": Target(0.7, upper=False),
}


@dataclass(frozen=True, slots=True)
class FMConfig:
    """Sizes and durations; :meth:`smoke` is the seconds-long variant the test suite runs."""

    batch_sizes: tuple[int, ...] = (32, 128, 512)
    #: many short rounds rather than few long ones: bare and engine then share the load swings
    rounds: int = 8
    seconds_per_point: float = 0.5  #: per round, batch size and method
    bare_around_live_s: float = 2.0  #: bare measured this long right before and after live
    in_process_pairs: int = 20_000
    live_pairs: int = 150_000
    live: bool = True
    live_timeout_s: float = 240.0
    #: Prometheus poll period of the live run. Each scrape renders every series in the worker
    #: (a thread holding the GIL): at 20 ms the scrapes took ~6 % of the worker's samples, so
    #: the observer slowed the observed; 100 ms bounds the timing error to ~1 % of a 10 s run.
    poll_s: float = 0.1

    @classmethod
    def smoke(cls) -> FMConfig:
        return cls(
            batch_sizes=(32, 128),
            rounds=1,
            seconds_per_point=0.05,
            bare_around_live_s=0.1,
            in_process_pairs=600,
            live_pairs=600,
            live_timeout_s=60.0,
            poll_s=0.02,
        )


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) of process ``pid`` so far; 0 where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _live(
    settings: Settings, bundle: Path, wl: PairWorkload, cfg: FMConfig, log_dir: Path
) -> dict[str, Any]:
    """Backlog of verified messages in Kafka, then one FM worker drains it; its pairs/s."""
    env = {"SOLARIS_EMBED_BATCH_SIZE": "128"}
    port = free_port()
    with LiveRun(settings, bundle, log_dir, env) as run:
        produce_s = run.produce_verified(wl.messages)
        total = wl.pairs
        run.start("fm", "embed", metrics_port=port)
        pid = run.children.procs[-1][1].pid
        deadline = time.monotonic() + cfg.live_timeout_s
        first: tuple[float, float, float] | None = None
        last: tuple[float, float, float] = (0.0, 0.0, 0.0)
        while last[1] < total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"live FM wrote {last[1]:.0f} of {total} pairs in time")
            n = scrape(port, EMBEDDED) or 0.0
            now, cpu = time.perf_counter(), _cpu_seconds(pid)
            if n and first is None:
                first = (now, n, cpu)
            if n != last[1]:
                last = (now, n, cpu)
            run.children.check()
            time.sleep(cfg.poll_s)
        calls = scrape(port, FM_CALLS) or 0.0
    if first is None:  # unreachable: the loop ends only once pairs were written
        raise RuntimeError("live FM wrote no pairs")
    span = last[0] - first[0]
    return {
        "pairs": total,
        "messages": len(wl.messages),
        "produce_seconds": produce_s,
        "seconds_first_to_last": span,
        "pairs_per_s": (last[1] - first[1]) / span if span > 0 else None,
        "worker_cpu_us_per_pair": per_pair_us(last[2] - first[2], last[1] - first[1]),
        "fm_calls": int(calls),
        "pairs_per_fm_call": total / calls if calls else None,
        "timed_by": f"Prometheus {EMBEDDED}, polled every {cfg.poll_s * 1000:.0f} ms",
        "embed_batch_messages": 128,
    }


def run_fm(settings: Settings, cfg: FMConfig | None = None, smoke: bool = False) -> BenchResult:
    """Train/load the bench bundle, then measure bare, embedder and (unless disabled) live."""
    from models.bundle import load_bundle

    cfg = cfg or (FMConfig.smoke() if smoke else FMConfig())
    machine = machine_info({"redis": redis_version(settings.store_url)})
    traffic = bench_traffic(settings, SMOKE_TRAFFIC if smoke else FULL_TRAFFIC)
    bundle_path = bench_bundle(settings, traffic, smoke)
    bundle = load_bundle(bundle_path, threads=settings.onnx_threads)
    fm = bundle.fm
    provider = fm.session.provider
    bare = bare_session(bundle_path / "fm.onnx", provider, settings.onnx_threads)
    wl = pair_workload(
        traffic, fm.history_len, max(cfg.in_process_pairs, cfg.live_pairs if cfg.live else 0)
    )
    props, hists = flatten(wl)
    props, hists = props[: cfg.in_process_pairs], hists[: cfg.in_process_pairs]
    rates = in_process(
        cfg.batch_sizes,
        cfg.rounds,
        cfg.seconds_per_point,
        bare,
        fm,
        props,
        hists,
        settings.pair_ttl_ms,
    )
    results: dict[str, Any] = {
        "bundle": bundle_path.name,
        "dim": fm.dim,
        "history_len": fm.history_len,
        "onnx_threads": settings.onnx_threads,
        "provider": provider,
        "pairs_per_s": {
            str(n): {k: v["pairs_per_s"] for k, v in r.items()} for n, r in rates.items()
        },
        "cpu_us_per_pair": {
            str(n): {k: v["cpu_us_per_pair"] for k, v in r.items()} for n, r in rates.items()
        },
    }
    ratios: dict[str, float | None] = {}
    for n, r in rates.items():
        bare_rate = r["bare"]["pairs_per_s"]
        for name in ("embedder", "sequential", "embed_only"):
            ratios[f"{name}_over_bare_{n}"] = ratio(r[name]["pairs_per_s"], bare_rate)
    if cfg.live:
        ref = 128 if 128 in cfg.batch_sizes else cfg.batch_sizes[-1]
        before = bare_at(bare, fm, props, hists, ref, cfg.bare_around_live_s)
        live = _live(settings, bundle_path, wl, cfg, settings.cache_dir / "run" / "bench-logs")
        after = bare_at(bare, fm, props, hists, ref, cfg.bare_around_live_s)
        per_call = round(live["pairs_per_fm_call"] or ref)
        matched = bare_at(bare, fm, props, hists, min(per_call, len(props)), cfg.bare_around_live_s)
        live["bare_around_live_pairs_per_s"] = (before + after) / 2
        live["bare_at_live_batch_pairs_per_s"] = matched
        live["bare_cpu_us_per_pair"] = bare_cpu_us(
            bare, fm, props, hists, ref, cfg.bare_around_live_s
        )
        results["live"] = live
        ratios[f"live_over_bare_{ref}"] = ratio(live["pairs_per_s"], (before + after) / 2)
        ratios["live_over_bare_matched"] = ratio(live["pairs_per_s"], matched)
    machine["fm_provider"] = provider
    return BenchResult("fm", machine, results, ratios, TARGETS if not smoke else {}, smoke)


def fm_table(res: BenchResult) -> list[list[str]]:
    """Rows ``batch | bare pairs/s | engine pairs/s | engine/bare | sequential/bare | CPU``
    (+ live). The engine overlaps FM calls with the rest as the embed agent does; sequential
    does one thing after the other; CPU is µs per pair of engine and bare (all threads)."""
    rows = []
    cpu = res.results.get("cpu_us_per_pair", {})
    for n, r in res.results["pairs_per_s"].items():
        c = cpu.get(n, {})
        rows.append(
            [
                n,
                f"{r['bare']:,.0f}",
                f"{r['embedder']:,.0f}",
                f"{r['embedder'] / r['bare']:.3f}",
                f"{r['sequential'] / r['bare']:.3f}",
                f"{c['embedder']:.1f} vs {c['bare']:.1f}" if c else "",
            ]
        )
    live = res.results.get("live")
    if live and live.get("pairs_per_s"):
        rows.append(
            [
                f"live ({live['pairs_per_fm_call']:.0f} pairs/call)",
                f"{live['bare_around_live_pairs_per_s']:,.0f}",
                f"{live['pairs_per_s']:,.0f}",
                f"{live['pairs_per_s'] / live['bare_around_live_pairs_per_s']:.3f}",
                "",
                _cpu_cell(live),
            ]
        )
    return rows


def _cpu_cell(live: dict[str, Any]) -> str:
    """CPU µs per pair, live worker / bare (the live row's last cell)."""
    cpu, bare = live.get("worker_cpu_us_per_pair"), live.get("bare_cpu_us_per_pair")
    return f"{cpu:.0f} vs {bare:.0f}" if cpu and bare else ""
