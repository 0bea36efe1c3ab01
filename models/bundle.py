"""Model bundles: the trained, exported models the streaming engine serves. No torch here.

A bundle is a directory::

    fm.onnx            FM (embedding + logit), see models.export; contract: models.fm_contract
    vm.onnx            baseline VM = the verifier (id-only)
    vm_fair.onnx       optional: the fair ranking VM (streaming user features), the baseline
                       transfer ratios are measured against (when the ranking VMs are fair)
    vm_solaris.onnx    the ranker's VM (embedding + tier), trained at the serving lag
    vocab.npz          fm_items, vm_users, vm_items: sorted raw ids (int64), no pickle
    item_vectors.npz   ids (sorted int64), vectors (float32 [n, fm_item_dim]): FM item embeddings
    meta.json          model_version, dim, history_len, dataset, serving_lag_ms,
                       split_boundaries_ms, metrics, config, ...
    evaluation.json    the full evaluation report (models.evaluate)

``ensure_bundle`` keys bundles by a hash of the traffic file's bytes + the training config
(+ ``CODE_VERSION``), trains one only when that key is absent (importing torch lazily), and
publishes it with an atomic rename, so concurrent callers never see a half-written bundle.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.config import CODE_VERSION, TrainConfig, file_digest
from models.errors import BundleError
from models.features import Vocab
from models.fm_contract import check_fm
from models.runtime import FMRunner, OnnxSession, SolarisRunner, StateRunner, VMRunner
from models.served import ServedTierSource

log = logging.getLogger(__name__)

FILES = ("fm.onnx", "vm.onnx", "vm_solaris.onnx", "vocab.npz", "meta.json")
#: optional: the FM split into user state + decoder (see models.export.export_fm_split)
SPLIT_FM_FILES = ("fm_state.onnx", "fm_decode.onnx")
#: optional: the fair VM (bundles before CODE_VERSION 11, or trained id-only, lack it)
FAIR_VM_FILE = "vm_fair.onnx"


@dataclass(frozen=True)
class BundleMeta:
    """``meta.json`` of a bundle."""

    model_version: str
    dim: int
    history_len: int
    dataset: str
    serving_lag_ms: int
    metrics: dict[str, Any]
    extra: dict[str, Any]

    @classmethod
    def read(cls, path: Path) -> BundleMeta:
        try:
            raw = json.loads(path.read_text())
            return cls(
                str(raw["model_version"]),
                int(raw["dim"]),
                int(raw["history_len"]),
                str(raw["dataset"]),
                int(raw["serving_lag_ms"]),
                dict(raw.get("metrics", {})),
                {k: v for k, v in raw.items() if k not in cls.__dataclass_fields__},
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BundleError(f"bad bundle metadata {path}: {exc}") from exc


@dataclass(frozen=True)
class ModelBundle:
    """Loaded runners of one bundle; ``fm.model_version == meta.model_version``."""

    path: Path
    meta: BundleMeta
    fm: FMRunner
    vm: VMRunner
    solaris: SolarisRunner
    #: the FM split into user state + decoder (bundles from before the split lack it)
    state: StateRunner | None = None
    #: the fair ranking VM, the transfer baseline (see ``FAIR_VM_FILE``)
    vm_fair: VMRunner | None = None


def load_bundle(
    path: Path | str, threads: int = 1, providers: Sequence[str] | None = None
) -> ModelBundle:
    """Open a bundle directory: three onnxruntime sessions (warmed up) and the vocabularies.

    ``fm.onnx`` is first checked against the FM contract (``models.fm_contract.check_fm``);
    a file that breaks it raises :class:`BundleError` listing each problem."""
    root = Path(path)
    missing = [f for f in FILES if not (root / f).is_file()]
    if missing:
        raise BundleError(f"bundle {root} lacks {missing}")
    meta = BundleMeta.read(root / "meta.json")
    try:
        with np.load(root / "vocab.npz", allow_pickle=False) as z:
            fm_items, users, items = (
                Vocab(z["fm_items"]),
                Vocab(z["vm_users"]),
                Vocab(z["vm_items"]),
            )
    except (OSError, ValueError, KeyError) as exc:
        raise BundleError(f"bad vocabulary file in {root}: {exc}") from exc
    # an FM brought from outside the trainer: refused here with the contract's reasons, not
    # at the first batch with onnxruntime's (one extra CPU load of fm.onnx and a batch of 3)
    fm_check = check_fm(root / "fm.onnx", dim=meta.dim, history_len=meta.history_len)
    if not fm_check.ok:
        raise BundleError(
            f"{root / 'fm.onnx'} does not meet the FM contract (`solaris models check` it, "
            f"docs/bring-your-own-fm.md): {'; '.join(fm_check.problems)}"
        )

    def session(name: str) -> OnnxSession:
        s = OnnxSession(root / name, threads=threads, providers=providers)
        if s.metadata.get("model_version") != meta.model_version:
            raise BundleError(
                f"{name} is version {s.metadata.get('model_version')!r}, "
                f"meta.json says {meta.model_version!r}"
            )
        return s

    fm = FMRunner(session("fm.onnx"), fm_items, meta.history_len, meta.model_version, meta.dim)
    vm = VMRunner(session("vm.onnx"), users, items, meta.history_len)
    solaris = SolarisRunner(session("vm_solaris.onnx"), users, items, meta.dim, meta.history_len)
    state = None
    if all((root / f).is_file() for f in SPLIT_FM_FILES):
        state = StateRunner(
            session(SPLIT_FM_FILES[0]),
            session(SPLIT_FM_FILES[1]),
            fm_items,
            meta.history_len,
            meta.dim,
        )
    fair = root / FAIR_VM_FILE
    vm_fair = (
        VMRunner(session(FAIR_VM_FILE), users, items, meta.history_len) if fair.is_file() else None
    )
    return ModelBundle(root, meta, fm, vm, solaris, state, vm_fair)


def bundle_key(traffic_path: Path | str, cfg: TrainConfig, served_key: str = "") -> str:
    """Cache key: hash of the traffic bytes, the config, ``CODE_VERSION`` and (engine-built
    training) the served knobs the engine ran with."""
    text = f"{file_digest(traffic_path)}:{cfg.fingerprint()}:{CODE_VERSION}:{served_key}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def ensure_bundle(
    traffic_path: Path | str,
    cfg: TrainConfig,
    cache_root: Path | str,
    report: Callable[[str], None] | None = None,
    served: ServedTierSource | None = None,
) -> Path:
    """The bundle directory for (traffic, cfg), training it first when not cached.

    Idempotent: a second call with the same inputs returns the same path without training.
    Blocks for the whole training when it has to train (minutes on 2 cores).
    """
    root = Path(cache_root)
    key = bundle_key(traffic_path, cfg, served.cache_key if served is not None else "")
    final = root / f"bundle-{key}"
    if all((final / f).is_file() for f in FILES):
        log.info("using cached bundle %s", final)
        return final
    root.mkdir(parents=True, exist_ok=True)
    from models.builder import build_bundle  # torch is imported only when training

    tmp = Path(tempfile.mkdtemp(prefix=f".bundle-{key}-", dir=root))
    try:
        build_bundle(Path(traffic_path), cfg, tmp, key, report, served)
        try:
            os.rename(tmp, final)
        except OSError:
            if not all((final / f).is_file() for f in FILES):  # not a concurrent winner
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
