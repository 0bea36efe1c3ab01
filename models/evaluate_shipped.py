"""The evaluation's ``shipped`` block: issue 22's verdict on the ``vm_solaris`` a bundle ships.

The report carries several served variants (embeddings only, with the state tier, with the KD
loss as well); a reader, and the README, need one answer for the model that actually ships
(``models.evaluate_names.shipped_vm_key``): its bar against tuned KD, in words, and its outage
against the fair VM, whatever it falls back to.
"""

from __future__ import annotations

from typing import Any

#: issue 22: the paper's own headroom closure, (0.43 − 0.225) / 0.775
H_BAR = 0.26

#: the bar each shipped model is judged by (``beats_kd*`` blocks of the report)
SHIPPED_BAR = {
    "vm_solaris_engine_kd": "beats_kd_with_kd",
    "vm_solaris_engine_blend": "beats_kd_blend",
}

#: paired differences the shipped model's outage needs against the fair ``vm``
SHIPPED_UNAVAILABLE = "shipped_unavailable_minus_vm"
SHIPPED_MISSING = "shipped_missing_tier_minus_vm"


def shipped_bar(shipped: str) -> str:
    return SHIPPED_BAR.get(shipped, "beats_kd")


def degradation_pairs(shipped: str, keys: list[str]) -> dict[str, tuple[str, str]]:
    """NE(shipped with every input unavailable / on the missing tier) − NE(vm), when the
    shipped model falls back to something other than the fair VM (``vm_kd``) and both were
    scored; the embedding-only models' pairs are the report's ``degradation`` already."""
    if shipped not in SHIPPED_BAR:
        return {}
    pairs = {
        SHIPPED_UNAVAILABLE: (f"{shipped}_unavailable", "vm"),
        SHIPPED_MISSING: (f"{shipped}_missing", "vm"),
    }
    return pairs if all(model in keys for model, _ in pairs.values()) else {}


def bar_verdict(bar: dict[str, Any], transfer_defined: bool) -> str:
    """The bar in one word: ``meets`` (NE(kd) − NE(served) above 0 by its paired interval,
    h ≥ 0.26, and the ceiling positive: the FM itself beats tuned KD beyond noise, since h
    divides by that margin), ``ahead`` (above 0 otherwise: h below the bar, or undefined
    because the FM's gain over the VM or over KD is not positive), ``level`` (the interval
    holds 0) or ``behind`` (below 0)."""
    lo, hi = bar["ne_kd_minus_served_ci95"]
    if lo > 0.0:
        h = bar.get("headroom_closure")
        ceiling = bar.get("ceiling", {}).get("fm_beats_kd")
        h_means_something = transfer_defined and ceiling == "positive"
        return "meets" if h_means_something and h is not None and h >= H_BAR else "ahead"
    return "behind" if hi < 0.0 else "level"


def shipped_block(
    shipped: str, report: dict[str, Any], diff_interval: dict[str, tuple[float, float]]
) -> dict[str, Any]:
    """What ships, its bar and verdict (with the bar's ceiling: the FM itself against KD), and
    its outage against the fair VM. ``report`` holds the ``beats_kd*`` and ``degradation``
    blocks and ``models`` (NE per model); ``diff_interval`` the bootstrap's paired intervals."""
    name = shipped_bar(shipped)
    bar = report[name]
    block: dict[str, Any] = {
        "model": shipped,
        "scored_as": bar["served_model"],
        "bar": name,
        "verdict": bar_verdict(bar, bool(report.get("transfer_defined", True))),
        "h_bar": H_BAR,
        "ne_kd_minus_served": bar["ne_kd_minus_served"],
        "ne_kd_minus_served_ci95": bar["ne_kd_minus_served_ci95"],
        "fm_beats_kd": bar["ceiling"]["fm_beats_kd"],
        # every served variant's verdict, so a user can see what the other choice would give
        "verdicts": {
            other: bar_verdict(report[other], bool(report.get("transfer_defined", True)))
            for other in ("beats_kd", "beats_kd_with_kd", "beats_kd_blend", "beats_kd_state_tier")
            if other in report
        },
    }
    if SHIPPED_UNAVAILABLE in diff_interval:
        ne = report["models"]
        lo, hi = diff_interval[SHIPPED_UNAVAILABLE]
        m_lo, m_hi = diff_interval[SHIPPED_MISSING]
        block["degradation"] = {
            "model": f"{shipped}_unavailable",
            "baseline": "vm",
            "ne_missing_minus_vm": ne[f"{shipped}_unavailable"]["ne"] - ne["vm"]["ne"],
            "ci95": [lo, hi],
            "holds": bool(lo <= 0.0),
            "missing_tier": {
                "model": f"{shipped}_missing",
                "ne_minus_vm": ne[f"{shipped}_missing"]["ne"] - ne["vm"]["ne"],
                "ci95": [m_lo, m_hi],
            },
        }
    else:
        block["degradation"] = report["degradation"]
    return block
