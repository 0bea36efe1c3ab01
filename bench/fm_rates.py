"""In-process FM rates of ``bench fm``: bare onnxruntime against the engine's embedder on the
same batches of real pairs, measured side by side (see :mod:`bench.fm`)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from bench.workload import PairWorkload
from models.features import fm_inputs
from models.runtime import FMRunner, UserHistory, cut_histories
from schemas.records import PairProposal
from store.memory import InMemoryStore
from streams.engine.embedder import Embedder, PreparedPairs


@dataclass(frozen=True, slots=True)
class Batch:
    """``size`` pairs: engine inputs (proposals + histories) and the bare model's tensors."""

    proposals: list[PairProposal]
    histories: list[UserHistory]
    tensors: dict[str, np.ndarray]


def flatten(wl: PairWorkload) -> tuple[list[PairProposal], list[UserHistory]]:
    props: list[PairProposal] = []
    hists: list[UserHistory] = []
    for m, h in zip(wl.messages, wl.histories, strict=True):
        for item in m.item_ids:
            props.append(PairProposal(m.request_id, m.user_id, item, m.event_time_ms, "candidates"))
            hists.append(h)
    return props, hists


def batches_of(
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


def bare_session(path: Path, provider: str, threads: int) -> ort.InferenceSession:
    """The FM as a plain ``InferenceSession`` with the engine's session options."""
    opts = ort.SessionOptions()
    if threads > 0:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=[provider])


def rate(
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


def rate_overlapped(
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


def in_process(
    batch_sizes: tuple[int, ...],
    rounds: int,
    seconds_per_point: float,
    bare: ort.InferenceSession,
    fm: FMRunner,
    props: list[PairProposal],
    hists: list[UserHistory],
    ttl_ms: int,
) -> dict[int, dict[str, dict[str, float]]]:
    """Pairs/s and CPU µs per pair (this process, all threads) of bare and of the engine's
    embedder per batch size, interleaved over rounds in rotating order.

    ``embedder`` is the engine as the embed agent runs it (FM calls overlapped with input
    building, records and the store write, see :func:`rate_overlapped`); ``sequential`` is
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
        return lambda batches, seconds: rate(step, batches, seconds)

    def overlapped(batches: list[Batch], seconds: float) -> tuple[int, float]:
        return rate_overlapped(embedder, store, ttl_ms, batches, seconds, model_thread)

    methods: list[tuple[str, Callable[[list[Batch], float], tuple[int, float]]]] = [
        ("bare", stepped(run_bare)),
        ("embedder", overlapped),
        ("sequential", stepped(run_sequential)),
        ("embed_only", stepped(run_embed_only)),
    ]
    batches = {n: batches_of(fm, props, hists, n) for n in batch_sizes}
    totals = {n: {name: [0, 0.0, 0.0] for name, _ in methods} for n in batch_sizes}
    with model_thread:
        for n in batch_sizes:  # warm-up: first runs allocate arenas and fill caches
            for _, run in methods:
                run(batches[n], seconds_per_point / 4)
        for r in range(rounds):
            for n in batch_sizes:
                for j in range(len(methods)):  # rotate which method goes first
                    name, run = methods[(r + j) % len(methods)]
                    cpu = time.process_time()
                    pairs, secs = run(batches[n], seconds_per_point)
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


def _bare_runs(
    bare: ort.InferenceSession,
    fm: FMRunner,
    props: list[PairProposal],
    hists: list[UserHistory],
    size: int,
    seconds: float,
) -> tuple[int, float, float]:
    """Pairs, wall seconds and CPU seconds (this process) of bare runs on batches of ``size``."""
    batches = batches_of(fm, props, hists, size, limit=8)
    if not batches:
        return 0, 0.0, 0.0
    start = time.process_time()
    pairs, secs = rate(lambda b: bare.run(None, b.tensors), batches, seconds)
    return pairs, secs, time.process_time() - start


def bare_at(
    bare: ort.InferenceSession,
    fm: FMRunner,
    props: list[PairProposal],
    hists: list[UserHistory],
    size: int,
    seconds: float,
) -> float:
    pairs, secs, _ = _bare_runs(bare, fm, props, hists, size, seconds)
    return pairs / secs if pairs else 0.0


def bare_cpu_us(
    bare: ort.InferenceSession,
    fm: FMRunner,
    props: list[PairProposal],
    hists: list[UserHistory],
    size: int,
    seconds: float,
) -> float | None:
    """Bare's CPU time per pair (µs, this process): next to the worker's CPU per pair it
    compares work done, which other jobs on the machine change far less than wall-clock rates."""
    pairs, _, cpu = _bare_runs(bare, fm, props, hists, size, seconds)
    return per_pair_us(cpu, pairs)


def per_pair_us(cpu_s: float, pairs: float) -> float | None:
    return cpu_s / pairs * 1e6 if pairs > 0 and cpu_s > 0 else None
