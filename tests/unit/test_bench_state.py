"""The state-tier benchmark runs (smoke) and reports CPU per request and bytes per user."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from bench.common import validate_shape
from bench.runner import report, run_bench
from streams.settings import Settings


def test_state_bench_smoke(tmp_path: Path) -> None:
    result = run_bench("state", Settings(), True, tmp_path / "state.json")
    doc = json.loads((tmp_path / "state.json").read_text())
    validate_shape(doc)
    assert doc["bench"] == "state" and doc["smoke"] is True
    assert {
        "decode_over_vm_solaris_p50",
        "blend_over_vm_solaris_p50",
        "decode_over_fm_p50",
        "state_over_aggregate_bytes",
    } <= set(doc["ratios"])
    res = doc["results"]
    width = res["state_width_floats"]
    assert width == 20 * 32 + 20 + 2 * 32 + 2  # L·D tokens, mask, two means, rate, log n
    # the state key holds two float16 states, each with its 16-byte header and 4-byte checksum
    assert res["bytes_per_user"]["state_key"] == 2 * (2 * width + 20)
    # measured with the real reader: the state tier adds no round trip and was served
    assert res["round_trips_per_lookup"] == {"state": 1.0, "aggregate": 1.0}
    assert res["lookup_served_state_tier"] is True
    assert {"lookup_state_over_aggregate_p50", "fm_group_split_over_whole_p50"} <= set(
        doc["ratios"]
    )
    assert "| decode |" in report(result) and "| vm_solaris_blend |" in report(result)
