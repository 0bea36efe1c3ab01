"""Issue 22 item 3: two item-aware fallback designs measured offline beside ``vm_solaris``
(``models.experiment`` calls :func:`fallback_diagnostics` at the serving lag), and the per-lag
views of the FM they are built from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from models.config import TrainConfig
from models.features import OOV, HistoryIndex, Vocab
from models.fm import FoundationModel
from models.offline_tiers import user_similar_items_mean
from models.runtime import TIER_AGGREGATE, TIER_MISSING
from models.train import Examples, fm_batch_inputs, predict_fm
from models.train_vm import VariantSpec, VMData, predict_vm

#: the user's latest pairs looked at, and how many of the most similar items (FM item vectors)
#: are averaged
ITEM_AWARE_LAST_N = 50
ITEM_AWARE_TOP_M = 5


@dataclass(frozen=True)
class LagViews:
    logit: np.ndarray  # float32 [M] over B ∪ C rows
    tiers: np.ndarray  # float32 [M, 3, d]
    score_tiers: np.ndarray  # float32 [M, 3, 1]: the same tiers built from logits
    available: np.ndarray  # bool [M, 3]


@dataclass(frozen=True)
class StateView:
    """Design B's vector per B ∪ C row (the FM as of the user's previous request)."""

    vectors: np.ndarray  # float32 [M, d]
    has: np.ndarray  # bool [M]


def state_lags(
    index: HistoryIndex, users: np.ndarray, times_ms: np.ndarray, window_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: how long ago the user's previous impression was (when a pipeline last computed
    the user's state), and whether there is one within ``window_ms``; lag 0 where there is not.
    The FM at that lag sees exactly the history known at that previous request."""
    prev = index.gather(users, times_ms, 1)
    since = np.asarray(times_ms, np.int64) - prev.times_ms[:, 0]
    has = prev.mask[:, 0] & (since <= window_ms)
    return np.where(has, since, 0).astype(np.int64), has


def fallback_diagnostics(
    cfg: TrainConfig,
    fm: FoundationModel,
    fm_vocab: Vocab,
    index: HistoryIndex,
    bc: Examples,
    view: LagViews,
    data: VMData,
    sl_te: slice,
    served: np.ndarray,
    fit: Any,
    spec: VariantSpec,
    lag: str,
) -> tuple[StateView, dict[str, np.ndarray]]:
    """Issue 22 item 3: two item-aware designs for the rows without an exact pair, each put in
    the aggregate slot (the plain aggregate where it has no value) and trained like
    ``vm_solaris`` (same grid point). ``vm_solaris_<design>_aware`` scores every test row on
    it (the analogue of ``vm_solaris_aggregate``), ``vm_solaris_<design>_served`` at the
    served draw.

    - ``item``: the similarity-weighted mean of the user's pairs for the items most similar
      to the candidate (``user_similar_items_mean``, FM item vectors);
    - ``state``: a user state stored at the user's previous request (the FM's history encoding
      as of then) decoded for the candidate by the FM's own head: the FM's output for this
      item with the history known at that request. The upper bound of a learned decoder.
    """
    idx = fm_vocab.lookup(bc.item)
    table = fm.item.weight.detach().cpu().numpy().astype(np.float32)
    item_vecs = np.where((idx == OOV)[:, None], 0.0, table[idx]).astype(np.float32)
    item_mean, n_item = user_similar_items_mean(
        bc.user,
        bc.time_ms,
        item_vecs,
        view.tiers[:, 0],
        cfg.aggregate_window_ms,
        ITEM_AWARE_LAST_N,
        ITEM_AWARE_TOP_M,
    )
    state_lag, has_state = state_lags(index, bc.user, bc.time_ms, cfg.aggregate_window_ms)
    state_emb, _ = predict_fm(fm, fm_batch_inputs(fm_vocab, index, bc, state_lag, cfg.history_len))
    out: dict[str, np.ndarray] = {}
    for design, vectors, has in (("item", item_mean, n_item > 0), ("state", state_emb, has_state)):
        tiers = view.tiers.copy()
        tiers[:, 1] = np.where(has[:, None], vectors, tiers[:, 1])
        available = view.available.copy()
        available[:, 1] |= has
        design_data = replace(data, tier_embeddings=tiers, tier_available=available)
        model = fit(spec, f"vm_solaris_{design}@{lag}", design_data, family_key="vm_solaris@0")
        test = design_data.take(np.arange(len(bc))[sl_te])
        agg = np.where(available[sl_te, 1], TIER_AGGREGATE, TIER_MISSING).astype(np.int64)
        out[f"vm_solaris_{design}_aware@{lag}"] = predict_vm(model, spec, test, agg)
        out[f"vm_solaris_{design}_served@{lag}"] = predict_vm(model, spec, test, served)
    return StateView(state_emb, has_state), out
