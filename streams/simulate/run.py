"""One ``solaris simulate`` run: the pipeline as configured, the oracle, and a random baseline."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

from schemas.records import ImpressionEvent, RequestEvent
from store.protocol import FeatureStore
from store.values import version_tag
from streams.engine.embedder import EmbeddingModel
from streams.engine.models import EngineModels
from streams.simulate.baselines import ForesightScorer, NullFM, RandomScorer
from streams.simulate.config import SimConfig
from streams.simulate.fair_baseline import against_fair_vm
from streams.simulate.report import combine, run_summary
from streams.simulate.simulator import Simulator

log = logging.getLogger(__name__)
Events = Callable[[], Iterable[RequestEvent | ImpressionEvent]]
Progress = Callable[[str, int], None]


def oracle_config(config: SimConfig) -> SimConfig:
    """Every candidate of every earlier request embedded: no verifier, no budget, no dedupe.
    Ungated (see :func:`reference`): the oracle embeds with :class:`NullFM`."""
    spec = dataclasses.replace(
        config.speculator, strategies=("candidates",), budget=0, refresh_after_ms=0
    )
    return reference(config).with_changes(speculator=spec, verify=False, test_start_ms=None)


def reference(config: SimConfig) -> SimConfig:
    """``config`` with its reader's version gate removed, for reference runs that embed with
    another model (:class:`NullFM`); :func:`gated` then gates it to that model."""
    return config.with_changes(reader=dataclasses.replace(config.reader, version_tag=None))


def gated(config: SimConfig, fm: EmbeddingModel) -> SimConfig:
    """``config`` whose reader accepts exactly ``fm``'s values, as the ranker's accepts only its
    bundle's. A config already gated to another version is a mistake (its reader would reject
    every value the run writes), so it raises ``ValueError``."""
    tag = version_tag(fm.model_version)
    if config.reader.version_tag not in (None, tag):
        raise ValueError(
            f"reader is gated to version tag {config.reader.version_tag}, "
            f"the FM is {fm.model_version!r} (tag {tag})"
        )
    return config.with_changes(reader=dataclasses.replace(config.reader, version_tag=tag))


def _run(
    name: str,
    events: Events,
    config: SimConfig,
    models: EngineModels,
    progress: Progress | None,
    store: FeatureStore | None = None,
) -> Simulator:
    sim = Simulator(gated(config, models.fm), models, store)
    sim.run(events(), (lambda n: progress(name, n)) if progress else None)
    log.info("simulation run done", extra={"run": name, "requests": sim.requests})
    return sim


def foresight_scorer(events: Events, horizon_ms: int) -> ForesightScorer:
    """A scorer that knows each pair's lookups in the next ``horizon_ms`` of the traffic."""
    requests = [
        (e.user_id, e.event_time_ms, e.candidates) for e in events() if isinstance(e, RequestEvent)
    ]
    return ForesightScorer.from_requests(requests, horizon_ms)


def simulate(
    events: Events,
    config: SimConfig,
    models: EngineModels,
    *,
    with_random: bool = True,
    progress: Progress | None = None,
    store: FeatureStore | None = None,
) -> dict[str, Any]:
    """Run achieved + oracle (+ random) and return the report dict (see :mod:`.report`).

    ``store`` (e.g. Redis) serves the achieved run; reference runs use the in-memory store.
    """
    achieved = _run("speculative", events, config, models, progress, store)
    null = NullFM(config.reader.dim)
    oracle = _run(
        "oracle", events, oracle_config(config), EngineModels(null, items=models.items), progress
    )
    random = foresight = None
    if with_random and config.verify and models.vm is not None:
        # Baselines at the same budget: random scores and scores that know the future, ranked
        # as they are (never re-ranked by a prior).
        verifier = dataclasses.replace(config.verifier, rank_by="vm")
        cfg = reference(config).with_changes(test_start_ms=None, verifier=verifier)
        random = run_summary(
            _run(
                "random",
                events,
                cfg,
                EngineModels(null, RandomScorer(7), items=models.items),
                progress,
            )
        )
        seer = foresight_scorer(events, config.pair_ttl_ms)
        foresight = run_summary(
            _run("foresight", events, cfg, EngineModels(null, seer, items=models.items), progress)
        )
    candidates = oracle.coverage.total / max(oracle.requests, 1)
    report = combine(run_summary(achieved), run_summary(oracle), candidates, random, foresight)
    if (
        achieved.eval is not None
        and len(achieved.eval)
        and models.vm is not None
        and models.solaris is not None
    ):
        predictions = achieved.eval.predict(
            models.vm, models.fm, models.solaris, vm_fair=models.vm_fair
        )
        ne = predictions.metrics()
        report["ne"] = ne
        gap = ne["vm"]["ne"] - ne["fm"]["ne"]
        report["transfer_ratio_at_achieved"] = (
            (ne["vm"]["ne"] - ne["vm_solaris_achieved"]["ne"]) / gap if gap else 0.0
        )
        report["transfer_by_tier"] = predictions.transfer_by_tier()
        report["eval_impressions"] = len(achieved.eval)
        report["vs_fair_vm"] = against_fair_vm(predictions)
    return report
