"""The simulator's transfer ratio against the fair VM, with intervals (issue 22).

``vm.onnx`` is the id-only verifier; the served ``vm_solaris`` also reads the fair VM's streaming
user features, so its gain over the verifier is partly those features and a ratio against it
can exceed 1 without any transfer. Bundles from ``CODE_VERSION`` 11 ship the fair ranking VM
(``vm_fair.onnx``); against it the ratio means what the issue's bar means. Where the FM's own
gain over the fair VM is within noise the ratio divides by noise, so the gain comes with a
paired user-bootstrap interval and a verdict, and the served model's gain with its own.
"""

from __future__ import annotations

from typing import Any

from models.metrics import user_bootstrap
from streams.simulate.evaluation import Predictions

ABSENT = (
    "the bundle has no vm_fair.onnx (trained before CODE_VERSION 11, or with "
    "SOLARIS_VM_USER_FEATURES=false): the ratio above is against the id-only verifier only"
)
SERVED = "vm_solaris_achieved"


def verdict(interval: tuple[float, float]) -> str:
    """ "positive" / "negative" when the 95 % interval excludes 0, else "within noise"."""
    lo, hi = interval
    return "positive" if lo > 0 else "negative" if hi < 0 else "within noise"


def against_fair_vm(pred: Predictions, replicates: int = 1000, seed: int = 0) -> dict[str, Any]:
    """NE gains over the fair VM (FM's and the served model's, paired intervals) and the
    transfer ratio at achieved coverage against it, overall and per served tier."""
    if pred.vm_fair is None or pred.users is None:
        return {"available": False, "reason": ABSENT}
    ne = {name: m["ne"] for name, m in pred.metrics().items()}
    boot = user_bootstrap(
        pred.users,
        pred.labels,
        {name: [p] for name, p in pred.models().items()},
        {"served": SERVED},
        vm="vm_fair",
        fm="fm",
        replicates=replicates,
        seed=seed,
        diff_pairs={"fm_gain": ("vm_fair", "fm"), "served_gain": ("vm_fair", SERVED)},
    )
    fm_gain = ne["vm_fair"] - ne["fm"]
    return {
        "available": True,
        "ne_vm_fair": ne["vm_fair"],
        "fm_gain": fm_gain,
        "fm_gain_ci95": list(boot.diff_interval["fm_gain"]),
        "fm_gain_is": verdict(boot.diff_interval["fm_gain"]),
        "served_gain": ne["vm_fair"] - ne[SERVED],
        "served_gain_ci95": list(boot.diff_interval["served_gain"]),
        "served_gain_is": verdict(boot.diff_interval["served_gain"]),
        "transfer_ratio_at_achieved": (ne["vm_fair"] - ne[SERVED]) / fm_gain if fm_gain else None,
        "transfer_ratio_ci95": list(boot.tr_interval["served"]),
        "transfer_by_tier": pred.transfer_by_tier("vm_fair"),
    }
