"""The evaluation report as Markdown (``models.evaluate.markdown`` re-exports it): the model
table at Δ = 0, transfer ratios by lag, the engine-built block and the bars against KD."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.config import lag_name
from models.evaluate_names import TABLE_TR, TR_MODELS


def _engine_lines(report: dict[str, Any]) -> list[str]:
    """The engine-built served mix next to the offline one at the serving lag (if trained)."""
    lag = lag_name(int(report["config"]["serving_lag_ms"]))
    block = report["lagged"].get(lag)
    if block is None or "solaris_engine" not in block["transfer_ratio"]:
        return []

    def cell(name: str) -> str:
        if not _defined(report):
            return UNDEFINED
        lo, hi = block["transfer_ratio_ci95"][name] or (None, None)
        return f"{_fmt(block['transfer_ratio'][name], 3)} [{_fmt(lo, 2)}, {_fmt(hi, 2)}]"

    distilled = (  # absent from reports written before the diagnostic existed
        f"; engine-built and distilled (vm_solaris_engine_kd) {cell('solaris_engine_kd')}"
        if "solaris_engine_kd" in block["transfer_ratio"]
        else ""
    )
    return [
        "",
        f"Served mix at Δ = {lag}: engine-built tiers (vm_solaris_engine) "
        f"{cell('solaris_engine')}, offline construction {cell('solaris_served')}, "
        f"exact tier {cell('solaris')}; engine-built with every input missing "
        f"{cell('solaris_engine_missing')}{distilled}.",
    ]


def _bar_line(report: dict[str, Any], bar: dict[str, Any]) -> str:
    d_lo, d_hi = bar["ne_kd_minus_served_ci95"]
    if _defined(report):
        h_lo, h_hi = bar["headroom_closure_ci95"] or (None, None)
        ratios = (
            f"TR served {_fmt(bar['tr_served'], 3)}, TR kd {_fmt(bar['tr_kd'], 3)}, "
            f"headroom closure h = {_fmt(bar['headroom_closure'], 3)} "
            f"[{_fmt(h_lo, 2)}, {_fmt(h_hi, 2)}]"
        )
    else:  # h divides by the FM's gain too (through the TRs): no number
        ratios = f"TR served {UNDEFINED}, TR kd {UNDEFINED}, headroom closure h = {UNDEFINED}"
    return (
        f"Against tuned KD ({report.get('vm_baseline', 'id-only')} VM baseline; served = "
        f"{bar['served_model']}, {bar['served_is']}): {ratios}; NE(kd) − NE(served) = "
        f"{_fmt(bar['ne_kd_minus_served'])} [{_fmt(d_lo)}, {_fmt(d_hi)}] (paired)"
        + _ceiling_note(bar)
        + _gain_note(bar)
    )


def _shipped_outage(shipped: dict[str, Any]) -> str:
    deg = shipped.get("degradation")
    if not deg:
        return "."
    lo, hi = deg["ci95"]
    return (
        f"; every input unavailable ({deg['model']}) − fair VM "
        f"{_fmt(deg['ne_missing_minus_vm'])} [{_fmt(lo)}, {_fmt(hi)}] (paired)."
    )


def _ceiling_note(bar: dict[str, Any]) -> str:
    """The bar's ceiling: the FM itself against tuned KD (reports before it: nothing)."""
    ceiling = bar.get("ceiling")
    if not ceiling:
        return ""
    lo, hi = ceiling["ne_kd_minus_fm_ci95"]
    return (
        f"; ceiling NE(kd) − NE(fm) = {_fmt(ceiling['ne_kd_minus_fm'])} [{_fmt(lo)}, {_fmt(hi)}]"
        f" ({ceiling['fm_beats_kd']})"
    )


def _gain_note(bar: dict[str, Any]) -> str:
    verdict = bar.get("fm_gain", "positive")
    if verdict == "positive":
        return "."
    return f"; the FM's gain over the VM is {verdict}: read NE differences, not ratios."


def _bar_lines(report: dict[str, Any]) -> list[str]:
    """Issue 22's bar: headroom closure over tuned KD, and the weak-baseline comparison."""
    if "beats_kd" not in report:  # reports written before the bar existed
        return []
    lines = [""] + [
        _bar_line(report, report[name])
        for name in ("beats_kd", "beats_kd_state_tier", "beats_kd_with_kd", "beats_kd_blend")
        if name in report
    ]
    shipped = report.get("shipped")
    if shipped is not None:
        lo, hi = shipped["ne_kd_minus_served_ci95"]
        lines.append(
            f"Shipped vm_solaris = {shipped['model']} (bar {shipped['bar']}): "
            f"{shipped['verdict']} (NE(kd) − NE(served) {_fmt(shipped['ne_kd_minus_served'])} "
            f"[{_fmt(lo)}, {_fmt(hi)}]; the FM itself against KD: {shipped['fm_beats_kd']})"
            + _shipped_outage(shipped)
        )
    deg = report.get("degradation")
    if deg is not None:
        lo, hi = deg["ci95"]
        lines.append(
            f"Every input unavailable, a store outage ({deg['model']}): NE − NE(vm) = "
            f"{_fmt(deg['ne_missing_minus_vm'])} [{_fmt(lo)}, {_fmt(hi)}] (paired): "
            + ("no worse than the VM." if deg["holds"] else "worse than the VM.")
        )
        tier = deg.get("missing_tier")
        if tier is not None:
            t_lo, t_hi = tier["ci95"]
            lines.append(
                f"Every row on the missing tier, nothing stored ({tier['model']}): NE − NE(vm) "
                f"= {_fmt(tier['ne_minus_vm'])} [{_fmt(t_lo)}, {_fmt(t_hi)}] (paired)."
            )
    vs = report.get("vs_id_only")
    if vs is not None:
        # its own verdict: these ratios divide by the FM's gain over the id-only VM
        trs = ", ".join(
            f"{k} {_fmt(v, 3) if _defined(vs) else UNDEFINED}"
            for k, v in vs["transfer_ratio"].items()
        )
        lines.append(
            f"Against the id-only VM (NE {_fmt(report['models']['vm_id_only']['ne'])}; the fair "
            f"VM's features alone gain {_fmt(vs['fair_vm_gain']['ne'])} NE): {trs}."
        )
    return lines


#: what a transfer-ratio cell reads when the FM's gain over the VM is not positive
UNDEFINED = "undefined"


def _defined(report: dict[str, Any]) -> bool:
    """False when the report says its transfer ratios divide by noise (issue 25 item 7); the
    cells then read "undefined" even in a report written before its numbers were nulled."""
    return report.get("transfer_defined") is not False


def _tr(x: float | None, report: dict[str, Any], digits: int = 3) -> str:
    return _fmt(x, digits) if _defined(report) else UNDEFINED


def _tr_cell(name: str, tr_of: dict[str, float | None], report: dict[str, Any]) -> str:
    """The model table's TR cell: blank for a model with no TR (or no finite one)."""
    if name not in tr_of:
        return ""
    if not _defined(report):
        return UNDEFINED
    return "" if tr_of[name] is None else _fmt(tr_of[name], 3)


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    """Two Markdown tables: models at Δ = 0, and transfer ratios by lag."""
    n = report["seeds"]
    lines = [
        f"### {report['dataset']}: test NE / AUC ({n} seeds, mean ± std; 95 % user-bootstrap CI)",
        "",
    ]
    if report.get("transfer_defined") is False:
        lines += [f"**TRANSFER UNDEFINED**: {report['transfer_undefined_reason']}.", ""]
    lines += [
        "| model | logloss | NE | NE 95% CI | AUC | TR |",
        "|---|---|---|---|---|---|",
    ]
    tr_of = {
        TR_MODELS[k].format(lag="0").removesuffix("@0"): v
        for k, v in report["transfer_ratio"].items()
    }
    for name, m in report["models"].items():
        lo, hi = m["ne_ci95"]
        tr = tr_of.get(name)
        lines.append(
            f"| {name} | {_fmt(m['logloss'])} | {_fmt(m['ne'])} ± {_fmt(m['ne_std'])} | "
            f"[{_fmt(lo)}, {_fmt(hi)}] | {_fmt(m['auc'])} ± {_fmt(m['auc_std'])} | "
            f"{_tr_cell(name, tr_of, report)} |"
        )
    lines += [
        "",
        "Transfer ratio TR = (NE_vm − NE_x) / (NE_vm − NE_fm) by FM-input lag Δ "
        "(mean ± std over seeds [95 % CI]):",
        "",
        "| Δ | solaris (exact) | fm_logit | solaris (aggregate) | solaris (served mix) "
        "| score tiers (served mix) | kd |",
        "|---|---|---|---|---|---|---|",
    ]
    blocks = {"0": report, **report["lagged"]}
    for lag, block in blocks.items():
        cells = []
        for name in TABLE_TR:
            if not _defined(report):
                cells.append(UNDEFINED)
                continue
            tr = block["transfer_ratio"].get(name)
            std = block["transfer_ratio_std"].get(name)
            lo, hi = block["transfer_ratio_ci95"].get(name) or (None, None)
            cells.append(f"{_fmt(tr, 3)} ± {_fmt(std, 3)} [{_fmt(lo, 2)}, {_fmt(hi, 2)}]")
        kd = _tr(report["transfer_ratio"].get("kd"), report)
        lines.append(f"| {lag} | " + " | ".join(cells) + f" | {kd} |")
    lines += _engine_lines(report)
    lines += _bar_lines(report)
    secs = report["training_seconds"]
    lines += [
        "",
        "served mix = test tiers drawn at the training mix "
        f"{tuple(report['config']['tier_rates'])} (exact, aggregate, neighbour_item, neighbour_aggregate, state, missing), "
        "falling through when a tier has no value; score tiers = the same pipeline carrying the "
        "FM's logit instead of its embedding.",
    ]
    lines += [
        "",
        f"Training time: {secs['total']:.0f} s for {n} seeds "
        f"(FM {np.mean(secs['fm_per_seed']):.0f} s per seed).",
    ]
    return "\n".join(lines)
