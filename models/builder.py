"""Train every model on a traffic file, evaluate, and write a bundle directory (torch).

Called by ``models.bundle.ensure_bundle`` (which owns caching) and by the CLI. The shipped
models are seed 0's: ``fm``, ``vm`` (verifier) and the ``vm_solaris`` trained at
``TrainConfig.serving_lag_ms``; the other seeds exist to put error bars on the evaluation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from models.blend_vm import BlendedVM
from models.bundle import FAIR_VM_FILE
from models.config import CODE_VERSION, TrainConfig, file_digest
from models.evaluate import evaluate_runs
from models.evaluate_names import shipped_vm_key
from models.experiment import Impressions, SeedRun, run_seed, verifier_vm
from models.export import OPSET, export_fm, export_fm_split, export_vm
from models.runtime import TIER_NAMES
from models.served import ServedTierSource
from models.train import Report
from models.vm import VerticalModel

log = logging.getLogger(__name__)


def json_safe(obj: Any) -> Any:
    """NaN/inf → None and numpy scalars → Python, so the JSON is strict."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def load_traffic_impressions(traffic_path: Path) -> tuple[Impressions, dict[str, Any]]:
    """Impressions (time-sorted) and the file's metadata, via part A's reader."""
    from models.data.traffic import load_traffic

    traffic = load_traffic(traffic_path)
    return Impressions.from_columns(traffic.impressions), dict(traffic.metadata)


def train_all(
    imps: Impressions,
    cfg: TrainConfig,
    report: Report | None = None,
    served: ServedTierSource | None = None,
) -> list[SeedRun]:
    """One ``SeedRun`` per seed; seed 0 tunes the VM grid, later seeds reuse its choices."""
    runs: list[SeedRun] = []
    tuned = None
    for seed in range(cfg.seeds):
        run = run_seed(imps, cfg, seed, tuned, report, served)
        tuned = run.tuned
        runs.append(run)
    return runs


def build_bundle(
    traffic_path: Path,
    cfg: TrainConfig,
    out_dir: Path,
    key: str,
    report: Report | None = None,
    served: ServedTierSource | None = None,
) -> dict[str, Any]:
    """Train, evaluate and export into ``out_dir``; returns the evaluation report.

    With ``served`` the shipped ``vm_solaris`` is the one trained on what the serving engine
    reads (``vm_solaris_engine``, or with tuned KD as ``cfg.vm_solaris_kd`` says); without,
    the one trained on the offline tier construction.
    """
    imps, traffic_meta = load_traffic_impressions(traffic_path)
    dataset = str(traffic_meta.get("dataset", "unknown"))
    runs = train_all(imps, cfg, report, served)
    evaluation = json_safe(evaluate_runs(dataset, imps, runs, cfg))
    traffic_meta["traffic_sha256"] = file_digest(traffic_path)
    write_bundle(runs, evaluation, cfg, out_dir, key, traffic_meta)
    return evaluation


def shipped_module(run: SeedRun, shipped: str) -> VerticalModel | BlendedVM:
    """The torch module exported as ``vm_solaris.onnx`` for the key ``shipped_vm_key`` gave."""
    if shipped in run.blends:  # the engine-built VM and vm_kd, blended in one graph
        return BlendedVM(run.vms["vm_solaris_engine"], run.vms["vm_kd"], run.blends[shipped])
    return run.vms[shipped]


def write_bundle(
    runs: list[SeedRun],
    evaluation: dict[str, Any],
    cfg: TrainConfig,
    out_dir: Path,
    key: str,
    traffic_meta: dict[str, Any],
) -> None:
    """Export seed 0's models, vocabularies, item vectors, meta.json and evaluation.json."""
    dataset = str(traffic_meta.get("dataset", "unknown"))
    version = f"solaris-{dataset}-{key[:12]}"
    run = runs[0]
    props = {
        "model_version": version,
        "dim": str(cfg.embedding_dim),
        "history_len": str(cfg.history_len),
        "dataset": dataset,
    }
    export_fm(run.fm, cfg.history_len, out_dir / "fm.onnx", props)
    # the same FM split into user state + decoder (the state tier's models, issue 22)
    export_fm_split(run.fm, cfg.history_len, out_dir, props)
    # vm.onnx is the verifier: id-only, also when the ranking VMs read user features
    export_vm(verifier_vm(run.vms), "vm", out_dir / "vm.onnx", props)
    if "vm_id_only" in run.vms:  # the ranking VMs are fair: ship the baseline TRs are against
        export_vm(run.vms["vm"], "vm_fair", out_dir / FAIR_VM_FILE, props)
    engine_trained = "vm_solaris_engine" in run.vms
    shipped = shipped_vm_key([*run.vms, *run.blends], cfg.vm_solaris_kd)
    export_vm(shipped_module(run, shipped), "vm_solaris", out_dir / "vm_solaris.onnx", props)
    # Item vectors for the neighbour tier's user representation: the FM's item embedding table
    # (rows 0/1 are padding/OOV), aligned with the sorted FM item vocabulary.
    np.savez(
        out_dir / "item_vectors.npz",
        ids=run.fm_vocab.ids,
        vectors=run.fm.item.weight.detach().cpu().numpy()[2:].astype(np.float32),
    )
    np.savez(
        out_dir / "vocab.npz",
        fm_items=run.fm_vocab.ids,
        vm_users=run.user_vocab.ids,
        vm_items=run.item_vocab.ids,
    )
    meta = {
        "model_version": version,
        "dim": cfg.embedding_dim,
        "history_len": cfg.history_len,
        "dataset": dataset,
        "serving_lag_ms": cfg.serving_lag_ms,
        "tiers": list(TIER_NAMES),
        # what the shipped vm_solaris learned from: the serving engine's reads, or the offline
        # construction (models.offline_tiers)
        "vm_solaris_trained_on": "engine" if engine_trained else "offline",
        # which trained VM that is: vm_solaris_engine_kd (both channels; a store outage scores
        # as vm_kd), vm_solaris_engine or vm_solaris (models.evaluate_names.shipped_vm_key)
        "vm_solaris_is": shipped,
        "vm_solaris_grid_point": dataclasses.asdict(run.tuned[shipped])
        if shipped in run.tuned
        else None,
        "vm_solaris_blend": vars(run.blends[shipped]) if shipped in run.blends else None,
        # vm_solaris reads the streaming user features (models.user_features) from histories
        "vm_user_features": cfg.vm_user_features,
        "engine_coverage": run.engine_coverage,
        "opset": OPSET,
        "code_version": CODE_VERSION,
        "traffic_sha256": traffic_meta.get("traffic_sha256"),
        # A-valid start, B start, B-valid start, C (test) start: the simulator evaluates on C.
        "split_boundaries_ms": list(run.split.boundaries_ms),
        "traffic_metadata": traffic_meta,
        "metrics": {
            "models": {
                k: {m: v[m] for m in ("logloss", "ne", "auc")}
                for k, v in evaluation["models"].items()
            },
            "transfer_ratio": evaluation["transfer_ratio"],
        },
        "config": cfg.to_dict(),
    }
    (out_dir / "meta.json").write_text(json.dumps(json_safe(meta), indent=2, sort_keys=True))
    (out_dir / "evaluation.json").write_text(json.dumps(evaluation, indent=2))
    log.info("bundle %s written to %s", version, out_dir)
