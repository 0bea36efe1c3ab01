"""The per-tier split of the transfer ratio at achieved coverage (`Predictions.transfer_by_tier`)."""

from __future__ import annotations

import numpy as np
import pytest

from store.tiers import Tier
from streams.simulate.evaluation import Predictions


def _predictions(seed: int = 0, n: int = 3_000) -> Predictions:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n).astype(np.int8)
    tiers = rng.choice([Tier.EXACT, Tier.AGGREGATE, Tier.MISSING], n, p=[0.3, 0.6, 0.1])
    # the FM knows more on exact rows than elsewhere, so per-tier FM gains differ
    sure = np.where(tiers == Tier.EXACT, 0.9, 0.7)
    truth = np.where(labels == 1, sure, 1 - sure)
    vm = np.full(n, 0.5, np.float32)
    fm = (0.5 + 0.8 * (truth - 0.5)).astype(np.float32)
    # served: the FM's probability on exact rows, halfway on aggregates, the VM's on missing
    served = np.where(tiers == Tier.EXACT, fm, np.where(tiers == Tier.AGGREGATE, (vm + fm) / 2, vm))
    return Predictions(labels, tiers.astype(np.uint8), vm, fm, served.astype(np.float32))


def test_contributions_sum_to_the_overall_transfer_ratio() -> None:
    p = _predictions()
    ne = p.metrics()
    overall = (ne["vm"]["ne"] - ne["vm_solaris_achieved"]["ne"]) / (ne["vm"]["ne"] - ne["fm"]["ne"])
    parts = p.transfer_by_tier()
    assert sum(v["contribution"] for v in parts.values()) == pytest.approx(overall, abs=1e-9)
    assert sum(v["share"] for v in parts.values()) == pytest.approx(1.0)


def test_within_tier_ratio_says_what_each_tier_keeps() -> None:
    parts = _predictions().transfer_by_tier()
    assert set(parts) == {"exact", "aggregate", "missing"}  # tiers with no rows left out
    assert parts["exact"]["transfer_ratio"] == pytest.approx(1.0)
    assert parts["missing"]["transfer_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert 0.0 < parts["aggregate"]["transfer_ratio"] < 1.0
    assert parts["exact"]["share"] == pytest.approx(0.3, abs=0.03)
