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

from models.fair_gain import gains_over_fair_vm, verdict
from streams.simulate.evaluation import Predictions

__all__ = ["ABSENT", "SERVED", "against_fair_vm", "verdict"]

ABSENT = (
    "the bundle has no vm_fair.onnx (trained before CODE_VERSION 11, or with "
    "SOLARIS_VM_USER_FEATURES=false): the ratio above is against the id-only verifier only"
)
SERVED = "vm_solaris_achieved"


def against_fair_vm(pred: Predictions, replicates: int = 1000, seed: int = 0) -> dict[str, Any]:
    """NE gains over the fair VM (FM's and the served model's, paired intervals) and the
    transfer ratio at achieved coverage against it, overall and per served tier
    (:func:`models.fair_gain.gains_over_fair_vm`, which the live audit uses too)."""
    if pred.vm_fair is None or pred.users is None:
        return {"available": False, "reason": ABSENT}
    gains = gains_over_fair_vm(pred.users, pred.labels, pred.models(), SERVED, replicates, seed)
    return {
        "available": True,
        **{k: v for k, v in gains.items() if not k.startswith("transfer_ratio")},
        "transfer_ratio_at_achieved": gains["transfer_ratio"],
        "transfer_ratio_ci95": gains["transfer_ratio_ci95"],
        "transfer_by_tier": pred.transfer_by_tier("vm_fair"),
    }
