"""Gains over the fair VM with paired intervals: one definition for the simulator and the live
audit (issue 22: "every transfer ratio is measured against the fair VM").

The fair VM reads the streaming user features a production ranker has without the FM; a ratio
against the id-only verifier counts those features as transfer. Where the FM's own gain over
the fair VM is within noise, a ratio divides by noise, so each gain comes with a paired
user-bootstrap 95 % interval and a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from models.metrics import normalized_entropy, user_bootstrap
from models.transfer_defined import fm_gain_verdict as verdict

__all__ = ["FAIR", "FM", "gains_over_fair_vm", "verdict"]

FAIR = "vm_fair"
FM = "fm"


def gains_over_fair_vm(
    users: np.ndarray,
    labels: np.ndarray,
    probs: Mapping[str, np.ndarray],
    served: str,
    replicates: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """NE of the fair VM; the FM's and ``served``'s NE gains over it with paired intervals and
    verdicts; the transfer ratio of ``served`` against it with its interval.

    ``probs`` holds at least ``vm_fair``, ``fm`` and ``served``, aligned with ``labels``."""
    ne = {name: normalized_entropy(labels, p) for name, p in probs.items()}
    boot = user_bootstrap(
        users,
        labels,
        {name: [p] for name, p in probs.items()},
        {"served": served},
        vm=FAIR,
        fm=FM,
        replicates=replicates,
        seed=seed,
        diff_pairs={"fm_gain": (FAIR, FM), "served_gain": (FAIR, served)},
    )
    fm_gain = ne[FAIR] - ne[FM]
    fm_ci, served_ci = boot.diff_interval["fm_gain"], boot.diff_interval["served_gain"]
    return {
        "ne_vm_fair": ne[FAIR],
        "fm_gain": fm_gain,
        "fm_gain_ci95": list(fm_ci),
        "fm_gain_is": verdict(fm_ci),
        "served_gain": ne[FAIR] - ne[served],
        "served_gain_ci95": list(served_ci),
        "served_gain_is": verdict(served_ci),
        "transfer_ratio": (ne[FAIR] - ne[served]) / fm_gain if fm_gain else None,
        "transfer_ratio_ci95": list(boot.tr_interval["served"]),
    }
