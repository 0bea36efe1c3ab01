"""Issue 22's verdict words on the shipped model, and which trained VM ships."""

from __future__ import annotations

from typing import Any

import pytest

from models.evaluate_names import shipped_vm_key
from models.evaluate_shipped import H_BAR, bar_verdict, degradation_pairs


def _bar(lo: float, hi: float, h: float | None, ceiling: str = "positive") -> dict[str, Any]:
    return {
        "ne_kd_minus_served_ci95": [lo, hi],
        "headroom_closure": h,
        "ceiling": {"fm_beats_kd": ceiling},
    }


@pytest.mark.parametrize(
    ("lo", "hi", "h", "defined", "want"),
    [
        (0.001, 0.01, H_BAR, True, "meets"),
        (0.001, 0.01, H_BAR - 0.01, True, "ahead"),
        (0.001, 0.01, 5.0, False, "ahead"),  # h divides by noise: never "meets"
        (0.001, 0.01, None, True, "ahead"),
        (0.0, 0.01, 5.0, True, "level"),  # an interval touching 0 is not above it
        (-0.002, 0.001, 5.0, True, "level"),
        (-0.002, -0.0001, -3.0, True, "behind"),
    ],
)
def test_bar_verdict(lo: float, hi: float, h: float | None, defined: bool, want: str) -> None:
    assert bar_verdict(_bar(lo, hi, h), defined) == want


@pytest.mark.parametrize("ceiling", ["within noise", "negative"])
def test_no_meets_while_the_fm_does_not_beat_kd(ceiling: str) -> None:
    """h divides by NE(kd) − NE(fm): where that margin is noise, h (2.42 on ml-100k, interval
    [-16, 18]) says nothing, and the served model's lead over KD is only "ahead"."""
    assert bar_verdict(_bar(0.004, 0.015, 2.42, ceiling), True) == "ahead"
    assert bar_verdict(_bar(0.004, 0.015, 2.42, "positive"), True) == "meets"


def test_shipped_vm_key_prefers_both_channels_then_engine_then_offline() -> None:
    trained = {"vm", "vm_kd", "vm_solaris", "vm_solaris_engine", "vm_solaris_engine_kd"}
    assert shipped_vm_key(trained, "loss") == "vm_solaris_engine_kd"
    assert shipped_vm_key(trained, "off") == "vm_solaris_engine"
    assert shipped_vm_key(trained, "blend") == "vm_solaris_engine"  # no blend fitted
    assert shipped_vm_key(trained | {"vm_solaris_engine_blend"}, "blend") == (
        "vm_solaris_engine_blend"
    )
    assert shipped_vm_key({"vm", "vm_solaris"}, "loss") == "vm_solaris"
    assert shipped_vm_key({"vm", "vm_solaris", "vm_solaris_engine"}, "loss") == (
        "vm_solaris_engine"
    )


def test_degradation_pairs_only_for_a_model_with_another_fallback() -> None:
    keys = ["vm", "vm_solaris_engine_kd_unavailable", "vm_solaris_engine_kd_missing"]
    assert degradation_pairs("vm_solaris_engine_kd", keys) == {
        "shipped_unavailable_minus_vm": ("vm_solaris_engine_kd_unavailable", "vm"),
        "shipped_missing_tier_minus_vm": ("vm_solaris_engine_kd_missing", "vm"),
    }
    assert degradation_pairs("vm_solaris_engine_kd", keys[:2]) == {}  # not scored: no pair
    assert degradation_pairs("vm_solaris_engine", keys) == {}
