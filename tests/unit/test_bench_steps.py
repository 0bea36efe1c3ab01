"""``solaris bench steps --smoke``: every step runs on the smoke workload, batched and one by
one, and the JSON carries CPU µs per message for each (values are not judged at smoke size)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import validate_shape
from bench.runner import report, run_bench
from bench.steps import STEPS
from streams.settings import Settings


def test_steps_smoke_measures_every_step_both_ways(tmp_path: Path) -> None:
    result = run_bench("steps", Settings(), True, tmp_path / "steps.json")
    doc = json.loads((tmp_path / "steps.json").read_text())
    validate_shape(doc)
    assert doc["bench"] == "steps" and doc["smoke"] is True
    counts = doc["results"]["messages"]
    assert 0 < counts["speculate"] <= 300 and counts["verify"] > 0 and counts["aggregate"] > 0
    for mode in ("batched", "one"):
        per = doc["results"]["cpu_us_per_message"][mode]
        assert all(per[step] > 0 for step in STEPS) and per["verify_vm"] > 0
    assert set(doc["ratios"]) == {f"{step}_batched_over_one" for step in STEPS}
    assert "verify: VM call" in report(result)
