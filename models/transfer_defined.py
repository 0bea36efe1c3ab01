"""Whether a transfer ratio means anything: the FM's gain by its interval, and the report
with every ratio withheld when that gain is not positive (issue 25 item 7).

A transfer ratio divides by the FM's NE gain over the VM; where that gain's 95 % interval holds
0 the ratio divides by noise, so reports say so and keep the numbers aside for diagnosis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fm_gain_verdict(interval: Sequence[float]) -> str:
    """The FM's NE gain over the VM by its 95 % interval: "positive", "within noise" (the
    interval holds 0: transfer ratios divide by noise) or "negative" (the VM alone is better)."""
    lo, hi = interval
    if lo > 0.0:
        return "positive"
    return "negative" if hi < 0.0 else "within noise"


def transfer_verdict(gap_interval: Sequence[float]) -> dict[str, Any]:
    """``transfer_defined`` is False when the FM's NE gain over the VM is not positive by its
    95 % interval: every transfer ratio then divides by noise (or by a loss), so the report
    says so loudly instead of letting a ratio read as a result (issue 25 item 7)."""
    verdict = fm_gain_verdict(gap_interval)
    if verdict == "positive":
        return {"transfer_defined": True, "transfer_undefined_reason": None}
    lo, hi = gap_interval
    return {
        "transfer_defined": False,
        "transfer_undefined_reason": f"the FM's NE gain over the VM is {verdict} "
        f"([{lo:.4f}, {hi:.4f}]): transfer ratios divide by noise; read the paired NE "
        "differences instead",
    }


#: fields of a ``beats_kd*`` bar that divide by the FM's NE gain over the VM (h through the TRs)
BAR_TR_FIELDS = (
    "tr_served",
    "tr_kd",
    "headroom_closure",
    "headroom_closure_ci95",
    "headroom_closure_per_seed",
)
#: fields of a TR block (the top level, each lag) that divide by that gain
BLOCK_TR_FIELDS = ("transfer_ratio", "transfer_ratio_std", "transfer_ratio_ci95")


def _nulled(x: Any) -> Any:
    """``x`` with every number replaced by None, its shape kept (names, interval pairs)."""
    if isinstance(x, dict):
        return {k: _nulled(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_nulled(v) for v in x]
    return None


def withhold_transfer(report: dict[str, Any]) -> dict[str, Any]:
    """Null every field of ``report`` that divides by the FM's NE gain over the VM (issue 25
    item 7): the top-level and per-lag TRs with their spread and intervals (within-tier TRs
    included), and each bar's TRs and headroom closure h. NE values and paired NE differences
    stay. The numbers move to ``transfer_ratios_if_defined``, for diagnosis only. Returns the
    report (changed in place)."""
    kept: dict[str, Any] = {
        "note": "diagnosis only: these divide by an FM gain over the VM that is not positive "
        "by its 95 % interval (transfer_undefined_reason); they are not results",
    }
    blocks = [(kept, report)]
    if "lagged" in report:
        kept["lagged"] = {lag: {} for lag in report["lagged"]}
        blocks += [(kept["lagged"][lag], block) for lag, block in report["lagged"].items()]
    for dest, block in blocks:
        for field in BLOCK_TR_FIELDS:
            if field in block:
                dest[field] = block[field]
                block[field] = _nulled(block[field])
    for name, bar in report.items():
        if name.startswith("beats_kd") and isinstance(bar, dict):
            kept[name] = {f: bar[f] for f in BAR_TR_FIELDS if f in bar}
            bar.update({f: _nulled(bar[f]) for f in BAR_TR_FIELDS if f in bar})
    report["transfer_ratios_if_defined"] = kept
    return report
