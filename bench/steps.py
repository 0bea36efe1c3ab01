"""``solaris bench steps``: the engine's pure steps alone, per message, batched vs one at a time.

The live pipeline worker is bound by its event loop (issue 23: one GIL), and the speculate,
verify and aggregate steps are most of that loop's own work. This bench runs each step
in-process on the bench traffic's requests and trained bundle (no broker, no tables), the way
the live agents call it (batches of ``batch`` messages) and the way the simulator does (batches
of one), side by side in one run, and reports the CPU µs per message of each and their ratio.

- speculate: the traffic's requests, state kept in dicts (as the simulator keeps it);
- verify: the proposals the speculate run made, scored by the bundle's VM; the time spent in
  the VM's ONNX call is reported apart (live it runs in a thread, off the event loop), so
  ``python`` is what the event loop pays. Users have no history and no embedding came back
  (the cheapest inputs: cutting each history before its request, which live does, is left
  out);
- aggregate: one FM message per verified request, with random vectors of the FM's width and
  the live dtype (the fold does not look at the values).

Numbers are process CPU time (``time.process_time``) over all messages, best of ``repeats``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.common import BenchResult, machine_info, ratio
from bench.workload import live_workload
from streams.settings import Settings

STEPS = ("speculate", "verify", "aggregate")


@dataclass(frozen=True, slots=True)
class StepsConfig:
    requests: int = 12_000
    batch: int = 200
    repeats: int = 3

    @classmethod
    def smoke(cls) -> StepsConfig:
        return cls(requests=300, batch=50, repeats=1)


class TimedScorer:
    """The VM with the time of its model calls counted (the part live runs off the loop)."""

    def __init__(self, scorer: Any) -> None:
        self.scorer, self.seconds = scorer, 0.0

    def score(self, *args: Any) -> np.ndarray:
        started = time.process_time()
        try:
            out: np.ndarray = self.scorer.score(*args)
            return out
        finally:
            self.seconds += time.process_time() - started


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _best(repeats: int, once: Callable[[], float]) -> float:
    return min(once() for _ in range(repeats))


class Workload:
    """The bench traffic's requests, the bundle's models and the engine config of ``settings``."""

    def __init__(self, settings: Settings, cfg: StepsConfig, smoke: bool) -> None:
        from models.data.traffic import read_traffic
        from schemas.records import RequestEvent
        from streams.engine.config import EngineConfig
        from streams.models_loader import load_models

        traffic, bundle = live_workload(settings, smoke)
        self.models, _ = load_models(settings, bundle)
        self.engine = EngineConfig.from_settings(settings, self.models.fm.dim)
        events = (e for e in read_traffic(traffic) if isinstance(e, RequestEvent))
        self.requests = [e for _, e in zip(range(cfg.requests), events, strict=False)]

    def stages(self, scorer: Any = None) -> Any:
        from streams.engine.models import EngineModels
        from streams.engine.stages import build_stages

        m = self.models
        models = m if scorer is None else EngineModels(**{**vars_of(m), "vm": scorer})
        e = self.engine
        return build_stages(
            e.speculator, e.verifier, models, e.aggregate_window_ms, e.aggregate_bucket_ms
        )


def vars_of(models: Any) -> dict[str, Any]:
    """An EngineModels' fields by name (a slots dataclass has no ``__dict__``)."""
    import dataclasses

    return {f.name: getattr(models, f.name) for f in dataclasses.fields(models)}


def speculate_run(w: Workload, batch: int) -> tuple[float, list[Any]]:
    """CPU s of speculating every request in batches of ``batch``, and the proposals."""
    from streams.engine.recurrence import EMPTY_MEMORY
    from streams.engine.steps.speculate import SpeculateInputs, speculate_step

    stages, reps, memories = w.stages(), {}, {}
    inputs = SpeculateInputs(
        lambda _: {},
        lambda _: frozenset(),
        lambda _: [],
        reps.get,
        lambda u: memories.get(u, EMPTY_MEMORY),
    )
    horizon = w.engine.reader.neighbour_aggregate_ttl_ms
    proposals: list[Any] = []
    started = time.process_time()
    for chunk in _chunks(w.requests, batch):
        out = speculate_step(chunk, inputs, stages, horizon)
        reps.update(out.reps)
        memories.update(out.memories)
        proposals.extend(p for _, p in out.proposals)
    return time.process_time() - started, proposals


def verify_run(w: Workload, proposals: list[Any], batch: int) -> tuple[float, float, list[Any]]:
    """CPU s of verifying ``proposals`` in batches of ``batch`` (ledgers carried as the
    drivers carry them), the part of it in the VM, and the verified messages."""
    from streams.engine.steps.verify import LedgerState, verify_requests

    scorer = TimedScorer(w.models.vm)
    verifier = w.stages(scorer).verifier
    ledgers: dict[int, LedgerState] = {}
    knobs = w.engine.verify_knobs()
    verified: list[Any] = []
    started = time.process_time()
    for chunk in _chunks(proposals, batch):
        results = verify_requests(
            chunk,
            lambda u: ledgers.get(u, LedgerState()),
            lambda _: [],
            verifier,
            knobs,
            lambda _: frozenset,  # no embedding came back: in-flight marks hold (cheapest rule)
        )
        for b, res in zip(chunk, results, strict=True):
            if res.ledger is not None:
                ledgers[b.user_id] = res.ledger
            if res.out is not None:
                verified.append(res.out)
    return time.process_time() - started, scorer.seconds, verified


def fm_messages(w: Workload, verified: list[Any]) -> list[Any]:
    """One FM message per verified request: its items, random vectors of the FM's width."""
    from schemas.records import EmbeddingBatch
    from schemas.vectors import VectorDtype

    rng = np.random.default_rng(0)
    dim, dtype = w.models.fm.dim, VectorDtype.FLOAT16
    return [
        EmbeddingBatch(
            b.request_id,
            b.user_id,
            b.event_time_ms,
            w.models.fm.model_version,
            dtype.value,
            dim,
            b.item_ids,
            rng.normal(size=(len(b.item_ids), dim)).astype(dtype.numpy).tobytes(),
        )
        for b in verified
    ]


def aggregate_run(w: Workload, messages: list[Any], batch: int) -> float:
    from streams.engine.aggregator import AggregateState
    from streams.engine.steps.aggregate import aggregate_step

    aggregator, states = w.stages().aggregator, {}
    started = time.process_time()
    for chunk in _chunks(messages, batch):
        aggregate_step(chunk, lambda u: states.setdefault(u, AggregateState()), aggregator)
    return time.process_time() - started


def run_steps(settings: Settings, _: Any = None, smoke: bool = False) -> BenchResult:
    cfg = StepsConfig.smoke() if smoke else StepsConfig()
    w = Workload(settings, cfg, smoke)
    _, proposals = speculate_run(w, cfg.batch)
    _, _, verified = verify_run(w, proposals, cfg.batch)
    messages = fm_messages(w, verified)
    counts = {"speculate": len(w.requests), "verify": len(proposals), "aggregate": len(messages)}
    per_message: dict[str, dict[str, float]] = {}
    for label, size in (("batched", cfg.batch), ("one", 1)):
        spec = _best(cfg.repeats, lambda s=size: speculate_run(w, s)[0])
        runs = [verify_run(w, proposals, size) for _ in range(cfg.repeats)]
        total, vm, _ = min(runs, key=lambda r: r[0] - r[1])
        agg = _best(cfg.repeats, lambda s=size: aggregate_run(w, messages, s))
        per_message[label] = {
            "speculate": 1e6 * spec / max(counts["speculate"], 1),
            "verify": 1e6 * (total - vm) / max(counts["verify"], 1),
            "verify_vm": 1e6 * vm / max(counts["verify"], 1),
            "aggregate": 1e6 * agg / max(counts["aggregate"], 1),
        }
    pairs = sum(len(m.item_ids) for m in messages)
    return BenchResult(
        "steps",
        machine_info(),
        results={
            "config": {"requests": cfg.requests, "batch": cfg.batch, "repeats": cfg.repeats},
            "messages": counts,
            "pairs_per_fm_message": pairs / max(len(messages), 1),
            "cpu_us_per_message": per_message,
        },
        ratios={
            f"{step}_batched_over_one": ratio(
                per_message["batched"][step], per_message["one"][step]
            )
            for step in STEPS
        },
        smoke=smoke,
    )


def steps_table(res: BenchResult) -> list[list[str]]:
    per = res.results["cpu_us_per_message"]
    counts = res.results["messages"]
    return [
        [
            step,
            f"{counts[step]:,}",
            f"{per['batched'][step]:.1f}",
            f"{per['one'][step]:.1f}",
            f"{res.ratios[f'{step}_batched_over_one']:.2f}",
        ]
        for step in STEPS
    ] + [
        [
            "verify: VM call (off the loop live)",
            "",
            f"{per['batched']['verify_vm']:.1f}",
            f"{per['one']['verify_vm']:.1f}",
            "",
        ]
    ]
