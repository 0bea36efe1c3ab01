"""One seed of the full offline experiment: FM on A, every VM variant on B, predictions on C.

See ``models.split`` for the no-leakage scheme. Per seed:

1. split by time; the FM item vocabulary is period A's items seen at least twice (rarer items
   map to OOV, which trains the FM's OOV slot); train the FM.
2. run the fixed FM over periods B and C at every lag Δ (history cut at t − Δ): pair
   embeddings, logits, and the offline aggregate / neighbour tiers built from them.
3. train the VM variants on B (tuned on B's tail; grid points of seed 0 are reused by later
   seeds), ``vm_fm_logit`` and ``vm_solaris`` once per lag, each under its own lag.
4. predict on C. Keys of ``SeedRun.test_probs``: ``fm``, ``vm``, ``vm_kd``, ``vm_solaris_kd``,
   and ``<variant>@<lag>`` for ``vm_fm_logit``, ``vm_solaris``, ``vm_solaris_aggregate``,
   ``vm_solaris_missing`` (lag names from ``models.config.lag_name``); with a serving engine
   also ``vm_solaris_engine*`` (e.g. ``vm_solaris_engine_kd`` and its ``_unavailable`` /
   ``_missing`` scorings).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from models.blend import Blend
from models.config import GridPoint, TrainConfig, lag_name
from models.engine_variants import blend_with_kd, score_with_outages
from models.experiment_data import Impressions, SeedRun, require_both_labels
from models.fallback_designs import LagViews, fallback_diagnostics
from models.fallback_designs import state_lags as state_lags  # re-exported
from models.features import HistoryIndex, Vocab, context_features
from models.fm import FoundationModel
from models.offline_tiers import item_neighbour_mean, user_window_mean
from models.runtime import TIER_AGGREGATE, TIER_EXACT, TIER_MISSING, TIER_UNAVAILABLE
from models.served import RowKeys, ServedTierSource, TrainedModels
from models.split import TimeSplit, time_split
from models.train import Examples, Report, fm_batch_inputs, predict_fm, train_fm
from models.train_vm import (
    FMHead,
    VariantSpec,
    VMData,
    predict_vm,
    sample_tiers,
    tune_vm,
)
from models.user_features import user_stream_inputs
from models.vm import VerticalModel
from models.vm_grid import kd_grid, kd_grid_or_none

log = logging.getLogger(__name__)

VM = VariantSpec("vm")
#: the id-only VM (user id, item id, context): the verifier, and the weak baseline reported next
#: to the fair ``vm`` when ``TrainConfig.vm_user_features`` is on
VM_ID_ONLY = VariantSpec("vm_id_only")
VM_KD = VariantSpec("vm_kd", kd=True)
VM_FM_LOGIT = VariantSpec("vm_fm_logit", fm_logit=True)
VM_SOLARIS = VariantSpec("vm_solaris", embedding=True)
VM_SOLARIS_KD = VariantSpec("vm_solaris_kd", embedding=True, kd=True)
VM_SCORE_TIERS = VariantSpec("vm_score_tiers", embedding=True)
#: vm_solaris trained on the tiers and vectors the serving engine actually read (ServedTierSource)
VM_SOLARIS_ENGINE = VariantSpec("vm_solaris_engine", embedding=True)
#: the same, also distilled from the FM's soft labels: both channels together, KD tuned on
#: ``vm_kd``'s weight × temperature grid; falls back to ``vm_kd`` when the store is unreadable
VM_SOLARIS_ENGINE_KD = VariantSpec("vm_solaris_engine_kd", embedding=True, kd=True)
IDENTITY_HEAD = FMHead(np.ones(1, np.float32), 0.0)  # the 1-d "embedding" is the logit itself
SERVED_SEED = 12345


def _task_fm_probs(
    cfg: TrainConfig,
    imps: Impressions,
    split: TimeSplit,
    fm_vocab: Vocab,
    index: HistoryIndex,
    test: Examples,
    seed: int,
    say: Report,
) -> np.ndarray:
    """Cross-task reference: an FM of the same shape trained on period A with the VMs' label
    (same history index, same vocabulary), its probabilities on the test rows. Only the TR's
    denominator; nothing is transferred from it."""
    task = Examples(imps.user_id, imps.item_id, imps.event_time_ms, imps.vm_label)
    fm_task = train_fm(
        cfg, fm_vocab, index, task.take(split.fm_train), task.take(split.fm_valid), seed, say
    )
    lags = np.zeros(len(test), dtype=np.int64)
    _, logit = predict_fm(fm_task, fm_batch_inputs(fm_vocab, index, test, lags, cfg.history_len))
    return 1.0 / (1.0 + np.exp(-logit))


def verifier_vm(vms: Mapping[str, VerticalModel]) -> VerticalModel:
    """The VM the verify step runs: id-only (``vm_id_only`` when the ranking VMs are fair)."""
    return vms.get("vm_id_only", vms["vm"])


def _fm_vocab(items: np.ndarray) -> Vocab:
    uniq, counts = np.unique(items, return_counts=True)
    return Vocab(uniq[counts >= 2])


def _lag_views(
    cfg: TrainConfig,
    fm: FoundationModel,
    vocab: Vocab,
    index: HistoryIndex,
    ex: Examples,
    lag_ms: int,
) -> LagViews:
    lags = np.full(len(ex), lag_ms, dtype=np.int64)
    emb, logit = predict_fm(fm, fm_batch_inputs(vocab, index, ex, lags, cfg.history_len))
    both = np.concatenate([emb, logit[:, None]], axis=1)  # one pass for vectors and scores
    agg, agg_n = user_window_mean(ex.user, ex.time_ms, both, cfg.aggregate_window_ms)
    nb, nb_n = item_neighbour_mean(
        ex.user, ex.item, ex.time_ms, both, cfg.aggregate_window_ms, cfg.neighbour_k
    )
    tiers = np.stack([both, agg, nb], axis=1)
    available = np.stack([np.ones(len(ex), bool), agg_n > 0, nb_n > 0], axis=1)
    return LagViews(logit, tiers[:, :, :-1], tiers[:, :, -1:], available)


def _fallback_base(
    cfg: TrainConfig, spec: VariantSpec, vms: Mapping[str, VerticalModel]
) -> VerticalModel | None:
    """The store-free VM an embedding variant falls back to (``vm_solaris_baseline_on_missing``):
    the plain ``vm``, or ``vm_kd`` for a variant also trained with the KD loss (what its team
    would serve in an outage; with every input unavailable it scores exactly as ``vm_kd``)."""
    if not (cfg.vm_solaris_baseline_on_missing and spec.embedding):
        return None
    if spec.kd and "vm_kd" in vms:
        return vms["vm_kd"]
    return vms.get("vm")


def run_seed(
    imps: Impressions,
    cfg: TrainConfig,
    seed: int,
    tuned: dict[str, GridPoint] | None = None,
    report: Report | None = None,
    engine_tiers: ServedTierSource | None = None,
) -> SeedRun:
    """Train the FM and all VM variants for one seed; predict on the test period.

    With ``engine_tiers``, ``vm_solaris_engine`` is also trained on the tiers and vectors the serving
    engine read for each B row, and evaluated on what it read for each C row."""
    say = report or (lambda msg: log.info("%s", msg))
    clock = time.perf_counter()
    seconds: dict[str, float] = {}
    split = time_split(imps.event_time_ms, cfg.split, cfg.fm_valid_fraction, cfg.vm_valid_fraction)
    require_both_labels(imps.label, {"FM training": split.fm_train, "test": split.test})
    if imps.task_label is not None:
        require_both_labels(imps.vm_label, {"VM training": split.vm_train, "test": split.test})
    ex = imps.examples()
    index = HistoryIndex(imps.user_id, imps.item_id, imps.label, imps.event_time_ms)
    fm_vocab = _fm_vocab(imps.item_id[split.fm_train])
    fm = train_fm(cfg, fm_vocab, index, ex.take(split.fm_train), ex.take(split.fm_valid), seed, say)
    seconds["fm"] = time.perf_counter() - clock

    rows = np.concatenate([split.vm_train, split.vm_valid, split.test])
    n_tr, n_va = split.vm_train.shape[0], split.vm_valid.shape[0]
    _sl_tr, _sl_va, sl_te = slice(0, n_tr), slice(n_tr, n_tr + n_va), slice(n_tr + n_va, None)
    bc = ex.take(rows)
    views = {lag: _lag_views(cfg, fm, fm_vocab, index, bc, lag) for lag in cfg.lags_ms}
    teacher = views[0].logit if 0 in views else _lag_views(cfg, fm, fm_vocab, index, bc, 0).logit
    probs: dict[str, np.ndarray] = {"fm": 1.0 / (1.0 + np.exp(-teacher[sl_te]))}
    if imps.task_label is not None:  # the TR's 1.0 is an FM that learnt the VMs' task
        probs["fm_source"] = probs["fm"]
        probs["fm"] = _task_fm_probs(
            cfg, imps, split, fm_vocab, index, bc.take(np.arange(len(bc))[sl_te]), seed, say
        )
        seconds["fm_task"] = time.perf_counter() - clock - seconds["fm"]

    vm_rows = np.concatenate([split.vm_train, split.vm_valid])
    user_vocab = Vocab.build(imps.user_id[vm_rows])
    item_vocab = Vocab.build(imps.item_id[vm_rows])
    base = VMData(
        user_vocab.lookup(bc.user),
        item_vocab.lookup(bc.item),
        context_features(bc.time_ms),
        imps.vm_label[rows],
        teacher_logit=teacher,
    )
    if cfg.vm_user_features:  # the same history the FM reads, cut at the event time itself
        feats = user_stream_inputs(
            item_vocab, bc.item, bc.time_ms, index.gather(bc.user, bc.time_ms, cfg.history_len)
        )
        base = replace(base, user_stats=feats["user_stats"], recent_pos=feats["recent_pos"])

    def fair(spec: VariantSpec) -> VariantSpec:
        return replace(spec, user_features=cfg.vm_user_features)

    tuned = dict(tuned or {})
    head = FMHead.of(fm)
    vms: dict[str, VerticalModel] = {}

    def fit(
        spec: VariantSpec,
        key: str,
        data: VMData,
        fm_head: FMHead | None = None,
        family_key: str | None = None,
        candidates: list[GridPoint] | None = None,
    ) -> VerticalModel:
        t0 = time.perf_counter()
        # A lagged variant reuses the learning rate / weight decay / id dropout its Δ = 0
        # sibling won on the grid (same model, same data, older inputs) and re-picks only
        # the epoch count: the grid costs 8 fits, this 1.
        family = tuned.get(family_key or key.split("@")[0] + "@0")
        if family is not None and candidates is None:
            candidates = [replace(family, epochs=0)]
        model, gp = tune_vm(
            spec,
            cfg,
            user_vocab.size,
            item_vocab.size,
            data.take(np.arange(n_tr)),
            data.take(np.arange(n_tr, n_tr + n_va)),
            seed,
            tuned.get(key),
            fm_head or head,
            candidates,
            _fallback_base(cfg, spec, vms),
        )
        tuned[key] = gp
        seconds[key] = time.perf_counter() - t0
        say(f"seed {seed}: {key} trained in {seconds[key]:.1f}s ({gp})")
        return model

    test = base.take(np.arange(len(bc))[sl_te])
    vm_spec = fair(VM)
    vms["vm"] = fit(vm_spec, "vm", base)
    probs["vm"] = predict_vm(vms["vm"], vm_spec, test, None)
    if cfg.vm_user_features:
        vms["vm_id_only"] = fit(VM_ID_ONLY, "vm_id_only", base)
        probs["vm_id_only"] = predict_vm(vms["vm_id_only"], VM_ID_ONLY, test, None)
    # KD gets vm_solaris's budget: its own grid of weight × temperature (same size), at the
    # optimiser point the plain vm won
    kd_spec = fair(VM_KD)
    vms["vm_kd"] = fit(kd_spec, "vm_kd", base, candidates=kd_grid(cfg, tuned["vm"]))
    probs["vm_kd"] = predict_vm(vms["vm_kd"], kd_spec, test, None)

    aggregate_share: dict[str, float] = {}
    n_test = len(test)
    for lag, view in views.items():
        name = lag_name(lag)
        data = replace(
            base,
            fm_logit=view.logit,
            tier_embeddings=view.tiers,
            tier_available=view.available,
        )
        test = data.take(np.arange(len(bc))[sl_te])
        logit_spec = fair(VM_FM_LOGIT)
        m = fit(logit_spec, f"vm_fm_logit@{name}", data)
        probs[f"vm_fm_logit@{name}"] = predict_vm(m, logit_spec, test, None)
        exact = np.zeros(n_test, np.int64)
        has_agg = view.available[sl_te, 1]
        aggregate_share[name] = float(np.mean(has_agg))
        # "as served": one fixed draw of tiers at the training mix, shared by both tiered VMs
        served = sample_tiers(
            np.random.default_rng(SERVED_SEED), view.available[sl_te], cfg.tier_rates
        )
        specs = [VM_SOLARIS, VM_SOLARIS_KD] if lag == 0 else [VM_SOLARIS]
        for plain in specs:
            spec = fair(plain)
            key = f"{spec.name}@{name}"
            m = fit(spec, key, data)
            if lag == cfg.serving_lag_ms and plain is VM_SOLARIS:
                vms["vm_solaris"] = m
            probs[key] = predict_vm(m, spec, test, exact)
            if plain is VM_SOLARIS:
                agg_tier = np.where(has_agg, TIER_AGGREGATE, TIER_MISSING).astype(np.int64)
                probs[f"vm_solaris_aggregate@{name}"] = predict_vm(m, spec, test, agg_tier)
                probs[f"vm_solaris_missing@{name}"] = predict_vm(
                    m, spec, test, np.full(n_test, TIER_MISSING, np.int64)
                )
                probs[f"vm_solaris_unavailable@{name}"] = predict_vm(
                    m, spec, test, np.full(n_test, TIER_UNAVAILABLE, np.int64)
                )
                probs[f"vm_solaris_served@{name}"] = predict_vm(m, spec, test, served)
        if lag == cfg.serving_lag_ms:
            state, diagnostics = fallback_diagnostics(
                cfg,
                fm,
                fm_vocab,
                index,
                bc,
                view,
                data,
                sl_te,
                served,
                fit,
                fair(VM_SOLARIS),
                name,
            )
            probs.update(diagnostics)
        # Score transfer through the same tiered store: a 1-d "embedding" = the FM's logit.
        scores = replace(data, tier_embeddings=view.score_tiers)
        score_spec = fair(VM_SCORE_TIERS)
        m = fit(score_spec, f"vm_score_tiers@{name}", scores, IDENTITY_HEAD)
        s_test = scores.take(np.arange(len(bc))[sl_te])
        probs[f"vm_score_tiers@{name}"] = predict_vm(m, score_spec, s_test, exact)
        probs[f"vm_score_tiers_served@{name}"] = predict_vm(m, score_spec, s_test, served)
    if "vm_solaris" not in vms:
        raise ValueError(f"serving_lag_ms {cfg.serving_lag_ms} is not in lags_ms {cfg.lags_ms}")
    engine_coverage: dict[str, float] = {}
    blends: dict[str, Blend] = {}
    if engine_tiers is not None:
        trained = TrainedModels(  # the verifier: the id-only VM (it has no user features)
            fm,
            fm_vocab,
            verifier_vm(vms),
            user_vocab,
            item_vocab,
            cfg.history_len,
            cfg.embedding_dim,
        )
        t0 = time.perf_counter()
        got = engine_tiers(trained, split, RowKeys(bc.user, bc.item, bc.time_ms, bc.label))
        say(
            f"seed {seed}: serving engine replayed in {time.perf_counter() - t0:.1f}s "
            f"({int((~got.found).sum())} of {len(bc)} rows unranked), tiers {got.coverage}"
        )
        engine_coverage = got.coverage
        view = views[cfg.serving_lag_ms]
        data = replace(
            base,
            fm_logit=view.logit,
            tier_embeddings=view.tiers,
            tier_available=view.available,
            served_tier=got.tier.astype(np.int64),
            served_embedding=got.vector.astype(np.float32),
        )
        engine_spec, engine_kd_spec = fair(VM_SOLARIS_ENGINE), fair(VM_SOLARIS_ENGINE_KD)
        solaris_key = f"vm_solaris@{lag_name(cfg.serving_lag_ms)}"  # when Δ = 0 was not run
        m = fit(engine_spec, "vm_solaris_engine", data, family_key="vm_solaris@0")
        vms["vm_solaris_engine"] = m
        test = data.take(np.arange(len(bc))[sl_te])
        score_with_outages(probs, "vm_solaris_engine", m, engine_spec, test)
        # both channels with KD's budget: every KD weight × temperature (vm_kd's grid) and
        # weight 0 at the optimiser point vm_solaris won; tuned["vm_solaris_engine_kd"]
        # records the KD point
        m_kd = fit(
            engine_kd_spec,
            "vm_solaris_engine_kd",
            data,
            candidates=kd_grid_or_none(cfg, tuned.get("vm_solaris@0") or tuned[solaris_key]),
        )
        vms["vm_solaris_engine_kd"] = m_kd  # shipped with vm_solaris_kd "loss"
        score_with_outages(probs, "vm_solaris_engine_kd", m_kd, engine_kd_spec, test)
        # the served VM and tuned KD blended on their validation logits (models.blend)
        blend = blend_with_kd(
            probs,
            ("vm_solaris_engine", m, engine_spec),
            (vms["vm_kd"], kd_spec),
            data.take(np.arange(n_tr, n_tr + n_va)),
            "vm_solaris_engine_blend",
        )
        blends["vm_solaris_engine_blend"] = blend
        say(f"seed {seed}: blend of vm_solaris_engine and vm_kd on validation {blend}")
        # the offline-trained vm_solaris fed what the engine serves: the old construction
        probs["vm_solaris_offline_on_engine"] = predict_vm(
            vms["vm_solaris"], fair(VM_SOLARIS), test, None
        )
        # design B at the engine's coverage: every row the engine served without an exact
        # pair gets the decoded user state instead, where the user has one
        swap = (got.tier != TIER_EXACT) & state.has
        st_data = replace(
            data,
            served_tier=np.where(swap, TIER_AGGREGATE, got.tier).astype(np.int64),
            served_embedding=np.where(swap[:, None], state.vectors, got.vector).astype(np.float32),
        )
        m_st = fit(engine_spec, "vm_solaris_engine_state", st_data, family_key="vm_solaris@0")
        st_test = st_data.take(np.arange(len(bc))[sl_te])
        probs["vm_solaris_engine_state"] = predict_vm(m_st, engine_spec, st_test, None)
    seconds["total"] = time.perf_counter() - clock
    return SeedRun(
        seed,
        split,
        probs,
        tuned,
        fm,
        fm_vocab,
        user_vocab,
        item_vocab,
        vms,
        seconds,
        aggregate_share,
        engine_coverage,
        blends,
    )
