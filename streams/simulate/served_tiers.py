"""Training features built by the serving engine itself (a ``models.served.ServedTierSource``).

``vm_solaris`` used to learn from an offline construction of the fallback tiers (an aggregate
over the user's *labelled impressions*, a neighbour tier from *any* users' embeddings of the
item) while the ranker was served the engine's (an aggregate over *verified speculated* pairs,
neighbours' aggregates that ignore the item): one feature distribution in training, another in
serving. Here the seed's freshly trained FM and VM are exported to ONNX, loaded with the serving
runtime, and the traffic is replayed through the simulator — speculate → verify → embed →
aggregate → neighbours → ``FeatureReader`` with the served knobs of ``Settings`` — recording,
for every labelled impression from period B on, the tier and vector the reader served at its
request. Needs torch (export): only training imports this module.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np

from models.served import RowKeys, ServedRows, TrainedModels
from models.split import TimeSplit
from store.tiers import TIER_NAMES, Tier
from streams.engine.models import EngineModels
from streams.settings import Settings
from streams.simulate.config import sim_config_from_settings
from streams.simulate.evaluation import EvalRows
from streams.simulate.simulator import Simulator

log = logging.getLogger(__name__)
ENGINE_VERSION = "engine-training"


class EngineServedTiers:
    """Replays ``traffic`` through the engine with each seed's models; see the module doc."""

    def __init__(self, traffic: Path, settings: Settings) -> None:
        self.traffic = Path(traffic)
        self.settings = settings
        knobs = asdict(sim_config_from_settings(settings, settings.embedding_dim))
        knobs["state_tier"] = settings.state_tier
        text = json.dumps(knobs, sort_keys=True, default=str)
        self.cache_key = "engine:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def __call__(self, models: TrainedModels, split: TimeSplit, rows: RowKeys) -> ServedRows:
        from models.data.traffic import read_traffic

        settings = self.settings.model_copy(
            update={"history_len": models.history_len, "embedding_dim": models.dim}
        )
        with tempfile.TemporaryDirectory(prefix="solaris-engine-") as tmp:
            engine_models = _runners(
                models, Path(tmp), settings.onnx_threads, with_state=settings.state_tier
            )
            config = sim_config_from_settings(
                settings,
                models.dim,
                test_start_ms=int(split.boundaries_ms[1]),  # period B on
                model_version=ENGINE_VERSION,
            )
            sim = Simulator(config, engine_models)
            sim.run(read_traffic(self.traffic))
        if sim.eval is None:
            raise ValueError("the simulator collected no evaluation rows")
        return align(sim.eval, rows, models.dim)


def _runners(
    models: TrainedModels, root: Path, threads: int, with_state: bool = True
) -> EngineModels:
    """Export the seed's FM (whole, and split for the state tier) and VM and load them with
    the serving runtime (what ships)."""
    from models.export import export_fm, export_fm_split, export_vm
    from models.runtime import FMRunner, OnnxSession, StateRunner, VMRunner
    from streams.models_loader import BundleItemVectors

    props = {"model_version": ENGINE_VERSION, "dim": str(models.dim)}
    export_fm(models.fm, models.history_len, root / "fm.onnx", props)
    export_vm(models.vm, "vm", root / "vm.onnx", props)
    np.savez(
        root / "item_vectors.npz",
        ids=models.fm_vocab.ids,
        vectors=models.fm.item.weight.detach().cpu().numpy()[2:].astype(np.float32),
    )
    fm = FMRunner(
        OnnxSession(root / "fm.onnx", threads=threads),
        models.fm_vocab,
        models.history_len,
        ENGINE_VERSION,
        models.dim,
    )
    vm = VMRunner(
        OnnxSession(root / "vm.onnx", threads=threads), models.user_vocab, models.item_vocab
    )
    state = None
    if with_state:
        state_path, decode_path = export_fm_split(models.fm, models.history_len, root, props)
        state = StateRunner(
            OnnxSession(state_path, threads=threads),
            OnnxSession(decode_path, threads=threads),
            models.fm_vocab,
            models.history_len,
            models.dim,
        )
    items = BundleItemVectors(root / "item_vectors.npz")
    return EngineModels(fm, vm, None, items, state)


def align(ev: EvalRows, rows: RowKeys, dim: int) -> ServedRows:
    """Match the simulator's evaluation rows to ``rows`` by (user, item, request time, label);
    repeated keys are matched in order. Unmatched rows are served as missing."""
    queue: dict[tuple[int, int, int, int], list[int]] = defaultdict(list)
    for j, key in enumerate(zip(ev.users, ev.items, ev.times, ev.labels, strict=True)):
        queue[key].append(j)
    n = len(rows.user)
    tier = np.full(n, Tier.MISSING, np.int64)
    vector = np.zeros((n, dim), np.float32)
    found = np.zeros(n, bool)
    keys = zip(
        rows.user.tolist(),
        rows.item.tolist(),
        rows.time_ms.tolist(),
        rows.label.tolist(),
        strict=True,
    )
    for i, key in enumerate(keys):
        hits = queue.get(key)
        if not hits:
            continue
        j = hits.pop(0)
        tier[i], vector[i], found[i] = ev.tiers[j], ev.vectors[j], True
    counts = np.bincount(tier, minlength=len(Tier))
    coverage = {name: float(c) / max(n, 1) for name, c in zip(TIER_NAMES, counts, strict=True)}
    if not found.all():
        log.warning("engine rows not found for %d of %d impressions", int((~found).sum()), n)
    return ServedRows(tier, vector, found, coverage)


def served_source(traffic: Path, settings: Settings) -> EngineServedTiers | None:
    """The engine-built training features for ``traffic``, unless switched off in settings."""
    return EngineServedTiers(traffic, settings) if settings.train_on_engine_tiers else None
