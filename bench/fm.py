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

import itertools
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from bench.common import BenchResult, Target, free_port, machine_info, ratio, redis_version
from bench.live import LiveRun, scrape
from bench.workload import (
    FULL_TRAFFIC,
    SMOKE_TRAFFIC,
    PairWorkload,
    bench_bundle,
    bench_traffic,
    pair_workload,
)
from models.features import fm_inputs
from models.runtime import FMRunner, UserHistory, cut_histories
from schemas.records import PairProposal
from store.memory import InMemoryStore
from streams.engine.embedder import Embedder, PreparedPairs
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


@dataclass(frozen=True, slots=True)
class Batch:
    """``size`` pairs: engine inputs (proposals + histories) and the bare model's tensors."""

    proposals: list[PairProposal]
    histories: list[UserHistory]
    tensors: dict[str, np.ndarray]


def _flatten(wl: PairWorkload) -> tuple[list[PairProposal], list[UserHistory]]:
    props: list[PairProposal] = []
    hists: list[UserHistory] = []
    for m, h in zip(wl.messages, wl.histories, strict=True):
        for item in m.item_ids:
            props.append(PairProposal(m.request_id, m.user_id, item, m.event_time_ms, "candidates"))
            hists.append(h)
    return props, hists


def _batches(
    fm: FMRunner, props: list[PairProposal], hists: list[UserHistory], size: int, limit: int = 64
) -> list[Batch]:
    """Up to ``limit`` consecutive batches of ``size`` pairs with their bare-model tensors."""
    out = []
    for start in range(0, len(props) - size + 1, size):
        p, h = props[start : start + size], hists[start : start + size]
        times = np.fromiter((x.event_time_ms for x in p), np.int64, size)
        items = np.fromiter((x.item_id for x in p), np.int64, size)
        tensors = fm_inputs(fm.item_vocab, items, times, cut_histories(h, times, fm.history_len))
        out.append(Batch(p, h, tensors))
        if len(out) >= limit:
            break
    return out


def _bare_session(path: Path, provider: str, threads: int) -> ort.InferenceSession:
    """The FM as a plain ``InferenceSession`` with the engine's session options."""
    opts = ort.SessionOptions()
    if threads > 0:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=[provider])


def _rate(
    step: Callable[[Batch], object], batches: list[Batch], seconds: float
) -> tuple[int, float]:
    """Run ``step`` over ``batches`` cyclically for about ``seconds``: (pairs, elapsed s)."""
    pairs, clock = 0, time.perf_counter
    start = clock()
    for b in itertools.cycle(batches):
        step(b)
        pairs += len(b.proposals)
        if clock() - start >= seconds:
            break
    return pairs, clock() - start


def _rate_overlapped(
    embedder: Embedder,
    store: InMemoryStore,
    ttl_ms: int,
    batches: list[Batch],
    seconds: float,
    model_thread: ThreadPoolExecutor,
) -> tuple[int, float]:
    """The embed agent's overlap in-process: the model thread runs batch k while this thread
    builds batch k+1's inputs and makes and stores batch k−1's records. (pairs, elapsed s)."""
    pairs, clock = 0, time.perf_counter
    pending: tuple[PreparedPairs, Future[np.ndarray]] | None = None
    start = clock()
    for b in itertools.cycle(batches):
        prepared = embedder.prepare(b.proposals, b.histories)
        running = (prepared, model_thread.submit(embedder.run, prepared))
        if pending is not None:
            store.write_pairs(embedder.records(pending[0], pending[1].result()), ttl_ms)
            pairs += len(pending[0])
        pending = running
        if clock() - start >= seconds:
            break
    if pending is not None:
        store.write_pairs(embedder.records(pending[0], pending[1].result()), ttl_ms)
        pairs += len(pending[0])
    return pairs, clock() - start


def _in_process(
    cfg: FMConfig,
    bare: ort.InferenceSession,
    fm: FMRunner,
    props: list[PairProposal],
    hists: list[UserHistory],
    ttl_ms: int,
) -> dict[int, dict[str, dict[str, float]]]:
    """Pairs/s and CPU µs per pair (this process, all threads) of bare and of the engine's
    embedder per batch size, interleaved over rounds in rotating order.

    ``embedder`` is the engine as the embed agent runs it (FM calls overlapped with input
    building, records and the store write, see :func:`_rate_overlapped`); ``sequential`` is
    one ``embed`` + store write after the other, and ``embed_only`` the same without the store
    write (where the time goes).
    """
    embedder = Embedder(fm)
    store = InMemoryStore()
    model_thread = ThreadPoolExecutor(1, thread_name_prefix="bench-model")

    def run_bare(b: Batch) -> object:
        return bare.run(None, b.tensors)

    def run_sequential(b: Batch) -> object:
        store.write_pairs(embedder.embed(b.proposals, b.histories), ttl_ms)
        return None

    def run_embed_only(b: Batch) -> object:
        return embedder.embed(b.proposals, b.histories)

    def stepped(step: Callable[[Batch], object]) -> Callable[[list[Batch], float], Any]:
        return lambda batches, seconds: _rate(step, batches, seconds)

    def overlapped(batches: list[Batch], seconds: float) -> tuple[int, float]:
        return _rate_overlapped(embedder, store, ttl_ms, batches, seconds, model_thread)

    methods: list[tuple[str, Callable[[list[Batch], float], tuple[int, float]]]] = [
        ("bare", stepped(run_bare)),
        ("embedder", overlapped),
        ("sequential", stepped(run_sequential)),
        ("embed_only", stepped(run_embed_only)),
    ]
    batches = {n: _batches(fm, props, hists, n) for n in cfg.batch_sizes}
    totals = {n: {name: [0, 0.0, 0.0] for name, _ in methods} for n in cfg.batch_sizes}
    with model_thread:
        for n in cfg.batch_sizes:  # warm-up: first runs allocate arenas and fill caches
            for _, run in methods:
                run(batches[n], cfg.seconds_per_point / 4)
        for r in range(cfg.rounds):
            for n in cfg.batch_sizes:
                for j in range(len(methods)):  # rotate which method goes first
                    name, run = methods[(r + j) % len(methods)]
                    cpu = time.process_time()
                    pairs, secs = run(batches[n], cfg.seconds_per_point)
                    tot = totals[n][name]
                    tot[0] += pairs
                    tot[1] += secs
                    tot[2] += time.process_time() - cpu
    return {
        n: {
            name: {"pairs_per_s": pairs / secs, "cpu_us_per_pair": cpu / pairs * 1e6}
            for name, (pairs, secs, cpu) in by.items()
        }
        for n, by in totals.items()
    }


def _bare_at(
    bare: ort.InferenceSession,
    fm: FMRunner,
    props: list[PairProposal],
    hists: list[UserHistory],
    size: int,
    seconds: float,
) -> float:
    batches = _batches(fm, props, hists, size, limit=8)
    if not batches:
        return 0.0
    pairs, secs = _rate(lambda b: bare.run(None, b.tensors), batches, seconds)
    return pairs / secs


def _bare_cpu_us(
    bare: ort.InferenceSession,
    fm: FMRunner,
    props: list[PairProposal],
    hists: list[UserHistory],
    size: int,
    seconds: float,
) -> float | None:
    """Bare's CPU time per pair (µs, this process): next to the worker's CPU per pair it
    compares work done, which other jobs on the machine change far less than wall-clock rates."""
    batches = _batches(fm, props, hists, size, limit=8)
    start = time.process_time()
    pairs, _ = _rate(lambda b: bare.run(None, b.tensors), batches, seconds) if batches else (0, 0)
    return _per_pair_us(time.process_time() - start, pairs)


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) of process ``pid`` so far; 0 where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _per_pair_us(cpu_s: float, pairs: float) -> float | None:
    return cpu_s / pairs * 1e6 if pairs > 0 and cpu_s > 0 else None


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
        "worker_cpu_us_per_pair": _per_pair_us(last[2] - first[2], last[1] - first[1]),
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
    bare = _bare_session(bundle_path / "fm.onnx", provider, settings.onnx_threads)
    wl = pair_workload(
        traffic, fm.history_len, max(cfg.in_process_pairs, cfg.live_pairs if cfg.live else 0)
    )
    props, hists = _flatten(wl)
    props, hists = props[: cfg.in_process_pairs], hists[: cfg.in_process_pairs]
    rates = _in_process(cfg, bare, fm, props, hists, settings.pair_ttl_ms)
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
        before = _bare_at(bare, fm, props, hists, ref, cfg.bare_around_live_s)
        live = _live(settings, bundle_path, wl, cfg, settings.cache_dir / "run" / "bench-logs")
        after = _bare_at(bare, fm, props, hists, ref, cfg.bare_around_live_s)
        per_call = round(live["pairs_per_fm_call"] or ref)
        matched = _bare_at(
            bare, fm, props, hists, min(per_call, len(props)), cfg.bare_around_live_s
        )
        live["bare_around_live_pairs_per_s"] = (before + after) / 2
        live["bare_at_live_batch_pairs_per_s"] = matched
        live["bare_cpu_us_per_pair"] = _bare_cpu_us(
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
