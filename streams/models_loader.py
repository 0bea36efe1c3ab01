"""Load the served models (a trained bundle) as the engine's model interfaces."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from streams.engine.models import EngineModels
from streams.errors import StreamsError
from streams.settings import Settings

log = logging.getLogger(__name__)
ITEM_VECTORS = "item_vectors.npz"


class BundleItemVectors:
    """Item vectors of a bundle (``item_vectors.npz``: sorted ``ids`` int64, ``vectors`` float32);
    unknown items map to zeros."""

    def __init__(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as z:
            self.ids = z["ids"].astype(np.int64)
            vectors = z["vectors"].astype(np.float32)
        self.dim = int(vectors.shape[1])
        # one zero row after the last: an unknown id's index points there, so a lookup is one
        # gather (``take``) with no mask assignment (it runs for every request's candidates)
        self._padded = np.vstack([vectors, np.zeros((1, self.dim), np.float32)])
        self.table = self._padded[:-1]
        self.mean = (
            self.table.mean(axis=0) if len(self.table) else np.zeros(self.dim, np.float32)
        ).astype(np.float32)

    def lookup(self, item_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(item_ids, np.int64)
        n = len(self.ids)
        if not n:
            return np.zeros((len(ids), self.dim), np.float32)
        pos = np.searchsorted(self.ids, ids)
        np.minimum(pos, n - 1, out=pos)
        pos[self.ids[pos] != ids] = n  # the zero row
        out: np.ndarray = self._padded.take(pos, axis=0)
        return out


def only_bundle(model_dir: Path) -> Path:
    """The bundle under ``model_dir`` when there is exactly one; else a clear error.

    Never "the newest by mtime": processes restarted after a new bundle lands would then serve
    it beside others still on the old one (a mixed FM group writing two models' vectors). With
    several bundles the deployment pins one (``SOLARIS_BUNDLE_DIR`` or ``--bundle``)."""
    bundles = sorted(model_dir.glob("bundle-*"))
    if not bundles:
        raise StreamsError(f"no trained bundle under {model_dir}: run `solaris train` first")
    if len(bundles) > 1:
        names = ", ".join(b.name for b in bundles[:5]) + (" ..." if len(bundles) > 5 else "")
        raise StreamsError(
            f"{len(bundles)} bundles under {model_dir} ({names}) and none pinned: set "
            "SOLARIS_BUNDLE_DIR (or pass --bundle) so every process serves the same one"
        )
    return bundles[0]


def load_models(settings: Settings, bundle_dir: Path | None = None) -> tuple[EngineModels, Path]:
    """The bundle's FM, VM, vm_solaris, item vectors and (``settings.state_tier``) split FM:
    ``bundle_dir``, else
    ``settings.bundle_dir``, else the only bundle under ``model_dir`` (:func:`only_bundle`)."""
    from models.bundle import load_bundle

    path = bundle_dir or settings.bundle_dir or only_bundle(settings.model_dir)
    providers = [p.strip() for p in settings.onnx_providers.split(",") if p.strip()]
    bundle = load_bundle(path, threads=settings.onnx_threads, providers=providers or None)
    items = BundleItemVectors(path / ITEM_VECTORS) if (path / ITEM_VECTORS).is_file() else None
    if items is None:
        log.warning(
            "bundle has no item vectors: neighbour tier disabled", extra={"bundle": str(path)}
        )
    log.info(
        "models loaded",
        extra={
            "bundle": str(path),
            "version": bundle.meta.model_version,
            "provider": bundle.fm.session.provider,
        },
    )
    state = bundle.state if settings.state_tier else None
    if settings.state_tier and state is None:
        log.warning(
            "bundle has no fm_state.onnx/fm_decode.onnx: state tier disabled",
            extra={"bundle": str(path)},
        )
    return EngineModels(bundle.fm, bundle.vm, bundle.solaris, items, state, bundle.vm_fair), path
