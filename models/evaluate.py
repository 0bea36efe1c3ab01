"""Turn per-seed test predictions into the evaluation report (JSON) and a Markdown table.

Report shape (issue 3 item 10; un-lagged numbers at the top level, extra keys welcome)::

    {"dataset", "seeds",
     "models": {name: {"logloss", "ne", "auc", "ne_std", "auc_std", "logloss_std",
                       "ne_ci95", "per_seed": [...]}},
     "transfer_ratio": {"kd", "fm_logit", "solaris", "solaris_kd", "solaris_aggregate",
                        "solaris_missing", "solaris_served", "score_tiers", "score_served"},
     "transfer_ratio_std": {...}, "transfer_ratio_ci95": {...},
     "lagged": {"1m": {"transfer_ratio": {"solaris", "fm_logit", "solaris_aggregate", ...},
                       "transfer_ratio_std": ..., "transfer_ratio_ci95": ...,
                       "models": {"vm_solaris", "vm_fm_logit", ...}}, "10m": ..., ...},
     "fm_vm_gap": {"ne", "ci95"}, "split": {...}, "training_seconds": {...}, ...}

Means are over seeds; ``*_std`` is the standard deviation over seeds; ``*_ci95`` is the 95 %
interval of the seed-averaged quantity from a bootstrap that resamples test *users*.
Transfer ratios at the top level are computed from the seed-mean NEs.

When ``transfer_defined`` is False (the FM's NE gain over the VM is not positive by its 95 %
interval) every field that divides by that gain is null, its shape kept: ``transfer_ratio*``
at the top level and in each lag, and each ``beats_kd*`` bar's ``tr_*`` and
``headroom_closure*``; the numbers sit in ``transfer_ratios_if_defined`` for diagnosis only.
``vs_id_only`` carries its own ``transfer_defined`` (its ratios divide by the FM's gain over
the id-only VM). NE values and paired NE differences are always numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.config import TrainConfig, lag_name
from models.evaluate_markdown import markdown as markdown
from models.evaluate_names import (
    ENGINE_TR,
    LAGGED_TR,
    TR_MODELS,
    VS_ID_ONLY_TR,
    shipped_vm_key,
)
from models.evaluate_shipped import degradation_pairs, shipped_block
from models.experiment import Impressions, SeedRun
from models.metrics import (
    BootstrapResult,
    headroom_closure,
    summary,
    transfer_ratio,
    user_bootstrap,
)
from models.transfer_defined import fm_gain_verdict, transfer_verdict, withhold_transfer


def served_model(keys: Sequence[str], cfg: TrainConfig) -> tuple[str, str]:
    """The model that stands for "what the ranker serves" and how it was built: the
    engine-built mix (the tiers the serving engine achieved) when trained, else the offline
    served mix at the serving lag."""
    if "vm_solaris_engine" in keys:
        return "vm_solaris_engine", "engine-built tiers at the coverage the serving engine achieved"
    lag = lag_name(cfg.serving_lag_ms)
    return f"vm_solaris_served@{lag}", f"offline tier construction at Δ = {lag}"


def missing_model(keys: Sequence[str], cfg: TrainConfig, kind: str = "unavailable") -> str:
    """``vm_solaris`` (the served one) scored with every input ``unavailable`` (the store could
    not be read: the degradation bar) or on the ``missing`` tier (nothing stored). Runs made
    before the unavailable code existed fall back to the missing tier."""
    lagged = f"vm_solaris_{kind}@{lag_name(cfg.serving_lag_ms)}"
    for candidate in (f"vm_solaris_engine_{kind}", lagged):
        if candidate in keys:
            return candidate
    return missing_model(keys, cfg, "missing") if kind == "unavailable" else lagged


def _degradation(
    stats: dict[str, dict[str, Any]],
    boot: BootstrapResult,
    model: str,
    missing: str,
    baseline: str = "vm",
    diff_keys: tuple[str, str] = ("missing_minus_vm", "missing_tier_minus_vm"),
) -> dict[str, Any]:
    """Graceful degradation, paired: ``vm_solaris`` with every input unavailable (a store
    outage) against ``baseline`` (the VM); it holds when the interval of NE(unavailable) −
    NE(baseline) includes 0 or lies below it. ``missing_tier`` is the same with every row on
    the missing tier (nothing stored for anyone), reported for comparison: that tier is
    informative, not an outage. ``diff_keys`` name the two paired differences in ``boot``."""
    nan = (float("nan"), float("nan"))
    lo, hi = boot.diff_interval.get(diff_keys[0], nan)
    m_lo, m_hi = boot.diff_interval.get(diff_keys[1], nan)
    return {
        "model": model,
        "baseline": baseline,
        f"ne_missing_minus_{baseline}": stats[model]["ne"] - stats[baseline]["ne"],
        "ci95": [lo, hi],
        "holds": bool(lo <= 0.0),
        "missing_tier": {
            "model": missing,
            f"ne_minus_{baseline}": stats[missing]["ne"] - stats[baseline]["ne"],
            "ci95": [m_lo, m_hi],
        },
    }


#: the paired difference that bounds every bar: NE(kd) − NE(fm)
KD_MINUS_FM = "kd_minus_fm"
CEILING_MEANING = (
    "the FM itself against tuned KD: where its interval holds 0, even a ranker that kept all of "
    "the FM's gain (TR = 1) would not beat KD measurably on this test set; a served model can "
    "still beat KD by adding to what the FM knows (the VM's own features), i.e. by beating the FM"
)


def _beats_kd(
    stats: dict[str, dict[str, Any]],
    boot: BootstrapResult,
    bar: str,
    served: tuple[str, str],
    n_seeds: int,
) -> dict[str, Any]:
    """Issue 22's bar: headroom closure h of the served mix over tuned KD, with the paired
    user-bootstrap interval of NE(kd) − NE(served) (same resamples for both models)."""
    key, how = served
    fm, vm, kd, sv = stats["fm"], stats["vm"], stats["vm_kd"], stats[key]
    tr_kd = transfer_ratio(vm["ne"], kd["ne"], fm["ne"])
    tr_served = transfer_ratio(vm["ne"], sv["ne"], fm["ne"])
    per_seed = []
    for s in range(n_seeds):
        ne = {m: stats[m]["per_seed"][s]["ne"] for m in ("vm", "fm", "vm_kd", key)}
        per_seed.append(
            headroom_closure(
                transfer_ratio(ne["vm"], ne[key], ne["fm"]),
                transfer_ratio(ne["vm"], ne["vm_kd"], ne["fm"]),
            )
        )
    diff_ci = boot.diff_interval.get(bar, (float("nan"), float("nan")))
    ceiling_ci = boot.diff_interval.get(KD_MINUS_FM, (float("nan"), float("nan")))
    return {
        "served_model": key,
        "served_is": how,
        "tr_served": tr_served,
        "tr_kd": tr_kd,
        "headroom_closure": headroom_closure(tr_served, tr_kd),
        "headroom_closure_ci95": list(boot.headroom_interval.get(bar, (float("nan"),) * 2)),
        "headroom_closure_per_seed": per_seed,
        "ne_kd_minus_served": kd["ne"] - sv["ne"],
        "ne_kd_minus_served_ci95": list(diff_ci),
        "fm_gain": fm_gain_verdict(boot.gap_interval),
        "ceiling": {
            "ne_kd_minus_fm": kd["ne"] - fm["ne"],
            "ne_kd_minus_fm_ci95": list(ceiling_ci),
            "fm_beats_kd": fm_gain_verdict(ceiling_ci),
            "meaning": CEILING_MEANING,
        },
        "bootstrap": "paired: one set of resampled test users for every model",
    }


def _vs_id_only(
    users: np.ndarray,
    y: np.ndarray,
    probs: dict[str, list[np.ndarray]],
    stats: dict[str, dict[str, Any]],
    cfg: TrainConfig,
) -> dict[str, Any]:
    """Key transfer ratios against the id-only VM (the baseline before issue 22)."""
    pairs = {
        name: TR_MODELS[name].format(lag="0")
        for name in VS_ID_ONLY_TR
        if TR_MODELS[name].format(lag="0") in probs
    }
    lag = lag_name(cfg.serving_lag_ms)
    pairs["solaris_served"] = f"vm_solaris_served@{lag}"
    boot = user_bootstrap(
        users, y, probs, pairs, vm="vm_id_only", replicates=cfg.bootstrap_replicates
    )
    base, fm = stats["vm_id_only"], stats["fm"]
    out = {
        "baseline": "vm_id_only",
        "transfer_ratio": {
            name: transfer_ratio(base["ne"], stats[model]["ne"], fm["ne"])
            for name, model in pairs.items()
            if model in stats
        },
        "transfer_ratio_ci95": {k: list(v) for k, v in boot.tr_interval.items()},
        "fm_vm_gap": {"ne": base["ne"] - fm["ne"], "ci95": list(boot.gap_interval)},
        "fair_vm_gain": {
            "ne": base["ne"] - stats["vm"]["ne"],
            "note": "NE(vm_id_only) − NE(vm): what the streaming user features alone give",
        },
        # these ratios divide by the FM's gain over the id-only VM: judged by its own interval
        **transfer_verdict(boot.gap_interval),
    }
    return out if out["transfer_defined"] else withhold_transfer(out)


def _public(key: str) -> str:
    """``vm_solaris@0`` → ``vm_solaris`` (the issue's top-level names)."""
    return key.removesuffix("@0")


def _model_stats(y: np.ndarray, per_seed: Sequence[np.ndarray]) -> dict[str, Any]:
    rows = [summary(y, p) for p in per_seed]
    out: dict[str, Any] = {}
    for metric in ("logloss", "ne", "auc"):
        vals = np.array([r[metric] for r in rows])
        out[metric] = float(vals.mean())
        out[f"{metric}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
    out["per_seed"] = rows
    return out


def _tr_block(
    names: Sequence[str],
    lag: str,
    stats: dict[str, dict[str, Any]],
    boot_tr: dict[str, Any],
    n_seeds: int,
) -> dict[str, Any]:
    tr, tr_std, tr_ci = {}, {}, {}
    fm, vm = stats["fm"], stats["vm"]
    for name in names:
        key = TR_MODELS[name].format(lag=lag)
        if key not in stats:
            continue
        tr[name] = transfer_ratio(vm["ne"], stats[key]["ne"], fm["ne"])
        per_seed = [
            transfer_ratio(
                vm["per_seed"][s]["ne"], stats[key]["per_seed"][s]["ne"], fm["per_seed"][s]["ne"]
            )
            for s in range(n_seeds)
        ]
        tr_std[name] = float(np.std(per_seed, ddof=1)) if n_seeds > 1 else 0.0
        tr_ci[name] = list(boot_tr.get(f"{name}@{lag}", (float("nan"), float("nan"))))
    return {"transfer_ratio": tr, "transfer_ratio_std": tr_std, "transfer_ratio_ci95": tr_ci}


def evaluate_runs(
    dataset: str,
    imps: Impressions,
    runs: Sequence[SeedRun],
    cfg: TrainConfig,
) -> dict[str, Any]:
    """The report dict for ``runs`` (one per seed, same split)."""
    split = runs[0].split
    y = imps.vm_label[split.test]
    users = imps.user_id[split.test]
    keys = list(runs[0].test_probs)
    probs = {k: [r.test_probs[k] for r in runs] for k in keys}
    stats = {k: _model_stats(y, probs[k]) for k in keys}
    tr_pairs = {
        f"{name}@{lag_name(lag)}": TR_MODELS[name].format(lag=lag_name(lag))
        for name in TR_MODELS
        for lag in cfg.lags_ms
    }
    served = served_model(keys, cfg)
    bars = {"beats_kd": served}
    if "vm_solaris_engine_state" in keys:  # design B served in place of the engine's fallbacks
        bars["beats_kd_state_tier"] = (
            "vm_solaris_engine_state",
            "engine-built tiers with a decoded user state in place of every non-exact tier",
        )
    if "vm_solaris_engine_kd" in keys:  # both channels: does SOLARIS add to distillation?
        bars["beats_kd_with_kd"] = (
            "vm_solaris_engine_kd",
            "engine-built tiers, trained with the tuned KD loss as well",
        )
    if "vm_solaris_engine_blend" in keys:  # both channels, blended on validation logits
        bars["beats_kd_blend"] = (
            "vm_solaris_engine_blend",
            "engine-built tiers blended with tuned KD on validation logits",
        )
    # the combined model's outage against what it falls back to: vm_kd
    kd_degradation = {
        "kd_missing_minus_vm_kd": ("vm_solaris_engine_kd_unavailable", "vm_kd"),
        "kd_missing_tier_minus_vm_kd": ("vm_solaris_engine_kd_missing", "vm_kd"),
    }
    kd_degradation = {k: v for k, v in kd_degradation.items() if v[0] in keys}
    shipped = shipped_vm_key(keys, cfg.vm_solaris_kd)
    boot = user_bootstrap(
        users,
        y,
        probs,
        tr_pairs,
        replicates=cfg.bootstrap_replicates,
        diff_pairs={
            **{name: ("vm_kd", model) for name, (model, _) in bars.items()},
            KD_MINUS_FM: ("vm_kd", "fm"),
            "missing_minus_vm": (missing_model(keys, cfg), "vm"),
            "missing_tier_minus_vm": (missing_model(keys, cfg, "missing"), "vm"),
            **kd_degradation,
            **degradation_pairs(shipped, keys),
        },
        headroom_pairs={name: (model, "vm_kd") for name, (model, _) in bars.items()},
    )
    for k in keys:
        stats[k]["ne_ci95"] = list(boot.ne_interval[k])
    top = _tr_block(list(TR_MODELS), "0", stats, boot.tr_interval, len(runs))
    lagged = {}
    for lag in cfg.lags_ms:
        if lag == 0:
            continue
        name = lag_name(lag)
        names = LAGGED_TR + (ENGINE_TR if lag == cfg.serving_lag_ms else ())
        block = _tr_block(names, name, stats, boot.tr_interval, len(runs))
        block["models"] = {_base(k): dict(stats[k]) for k in keys if k.endswith(f"@{name}")}
        block["aggregate_share"] = float(np.mean([r.aggregate_share[name] for r in runs]))
        lagged[name] = block
    seconds = {
        "per_seed_total": [r.seconds["total"] for r in runs],
        "fm_per_seed": [r.seconds["fm"] for r in runs],
        "total": float(sum(r.seconds["total"] for r in runs)),
    }
    extra: dict[str, Any] = {
        name: _beats_kd(stats, boot, name, model, len(runs)) for name, model in bars.items()
    }
    extra["degradation"] = _degradation(
        stats, boot, missing_model(keys, cfg), missing_model(keys, cfg, "missing")
    )
    if len(kd_degradation) == 2:
        extra["degradation_with_kd"] = _degradation(
            stats,
            boot,
            "vm_solaris_engine_kd_unavailable",
            "vm_solaris_engine_kd_missing",
            "vm_kd",
            ("kd_missing_minus_vm_kd", "kd_missing_tier_minus_vm_kd"),
        )
    if "vm_id_only" in stats:
        extra["vs_id_only"] = _vs_id_only(users, y, probs, stats, cfg)
    extra.update(transfer_verdict(boot.gap_interval))
    report = {
        **extra,
        "vm_baseline": "fair (streaming user features)" if cfg.vm_user_features else "id-only",
        "dataset": dataset,
        "seeds": len(runs),
        "models": {_public(k): dict(stats[k]) for k in keys if "@" not in k or k.endswith("@0")},
        **top,
        "lagged": lagged,
        "fm_vm_gap": {
            "ne": stats["vm"]["ne"] - stats["fm"]["ne"],
            "ci95": list(boot.gap_interval),
        },
        "aggregate_share": float(np.mean([r.aggregate_share["0"] for r in runs]))
        if "0" in runs[0].aggregate_share
        else None,
        # the tier mix the serving engine achieved over B ∪ C, per seed (empty: not engine-built)
        "engine_coverage": [dict(r.engine_coverage) for r in runs],
        "split": {
            "fm_train": int(split.fm_train.size),
            "fm_valid": int(split.fm_valid.size),
            "vm_train": int(split.vm_train.size),
            "vm_valid": int(split.vm_valid.size),
            "test": int(split.test.size),
            "test_users": int(np.unique(users).size),
            "test_base_rate": float(y.mean()),
            "boundaries_ms": list(split.boundaries_ms),
            "scheme": "FM on period A, every VM on period B with the fixed FM's outputs, "
            "test on period C (models.split)",
        },
        "tuned": {k: vars(v) for k, v in runs[0].tuned.items()},
        # per seed: the validation-fitted blends (models.blend), by the model they make
        "blends": [{k: vars(b) for k, b in r.blends.items()} for r in runs],
        "training_seconds": seconds,
        "bootstrap": {"replicates": boot.replicates, "resampled": "users"},
        "config": cfg.to_dict(),
    }
    # issue 22's verdict on the model the bundle ships
    report["shipped"] = shipped_block(shipped, report, boot.diff_interval)
    return report if report["transfer_defined"] else withhold_transfer(report)


def _base(key: str) -> str:
    return key.split("@", 1)[0]
