"""A transfer ratio over an FM gain that is noise is flagged, not reported as a result."""

from __future__ import annotations

import pytest

from models.transfer_defined import transfer_verdict


@pytest.mark.parametrize(
    ("interval", "defined", "words"),
    [
        ((0.004, 0.011), True, None),
        ((-0.014, 0.032), False, "within noise"),
        ((-0.043, -0.015), False, "negative"),
    ],
)
def test_transfer_is_defined_only_for_a_positive_fm_gain(
    interval: tuple[float, float], defined: bool, words: str | None
) -> None:
    verdict = transfer_verdict(interval)
    assert verdict["transfer_defined"] is defined
    if words is None:
        assert verdict["transfer_undefined_reason"] is None
    else:
        assert words in verdict["transfer_undefined_reason"]
