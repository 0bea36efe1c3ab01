"""Scoring helpers for the engine-built VMs of ``models.experiment.run_seed``: each scored as
served and under the two store outcomes the bars read, and the blend with tuned KD."""

from __future__ import annotations

import numpy as np

from models.blend import Blend, fit_blend
from models.runtime import TIER_MISSING, TIER_UNAVAILABLE
from models.train_vm import VariantSpec, VMData, predict_vm
from models.vm import VerticalModel

#: suffix of the probability key → the tier every row gets (none: as served)
OUTAGES: tuple[tuple[str, int | None], ...] = (
    ("", None),
    ("_missing", TIER_MISSING),
    ("_unavailable", TIER_UNAVAILABLE),
)


def score_with_outages(
    probs: dict[str, np.ndarray], key: str, model: VerticalModel, spec: VariantSpec, test: VMData
) -> None:
    """``probs[key]`` as served, ``key_missing`` with every row on the missing tier (nothing
    stored) and ``key_unavailable`` with every input unavailable (a store outage)."""
    n = len(test.label)
    for suffix, tier in OUTAGES:
        rows = None if tier is None else np.full(n, tier, np.int64)
        probs[key + suffix] = predict_vm(model, spec, test, rows)


def blend_with_kd(
    probs: dict[str, np.ndarray],
    served: tuple[str, VerticalModel, VariantSpec],
    kd: tuple[VerticalModel, VariantSpec],
    valid: VMData,
    out: str,
) -> Blend:
    """Fit the blend of the served VM and ``vm_kd`` on the validation rows (models.blend) and
    score ``out`` (and its outage variants) from the test probabilities already in ``probs``."""
    key, model, spec = served
    blend = fit_blend(
        predict_vm(model, spec, valid, None), predict_vm(kd[0], kd[1], valid, None), valid.label
    )
    for suffix, _ in OUTAGES:
        probs[out + suffix] = blend.prob(probs[key + suffix], probs["vm_kd"])
    return blend
