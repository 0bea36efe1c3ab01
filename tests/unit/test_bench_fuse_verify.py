"""The fuse-verify bench's pure parts: medians over rounds and its table."""

from __future__ import annotations

from bench.common import BenchResult
from bench.fuse_verify import fuse_table, median_cpu


def step(mode: str, rate: float, rnd: int, total: float, pipeline: float) -> dict[str, object]:
    cpu = {"total": total, "pipeline": pipeline, "fm": 1.0, "broker": 2.0, "redis": 0.5}
    return {
        "mode": mode,
        "round": rnd,
        "target_events_per_s": rate,
        "achieved_events_per_s": rate,
        "max_lag": 3,
        "kept_up": True,
        "cpu_us_per_event": cpu,
    }


def test_median_cpu_is_per_mode_and_rate_over_rounds() -> None:
    steps = [
        step("separate", 400, 0, 900, 600),
        step("separate", 400, 1, 1000, 700),
        step("separate", 400, 2, 5000, 4000),  # an outlier round: the median ignores it
        step("fused", 400, 0, 700, 400),
        step("fused", 800, 0, 500, 300),
    ]
    got = median_cpu(steps)
    assert got[("separate", 400)]["total"] == 1000 and got[("separate", 400)]["pipeline"] == 700
    assert got[("fused", 400)]["pipeline"] == 400
    assert set(got) == {("separate", 400), ("fused", 400), ("fused", 800)}


def test_median_cpu_leaves_out_a_process_a_round_could_not_measure() -> None:
    steps = [step("fused", 400, 0, 700, 400), step("fused", 400, 1, 800, 500)]
    steps[1]["cpu_us_per_event"]["redis"] = None  # type: ignore[index]
    got = median_cpu(steps)[("fused", 400)]
    assert "redis" not in got and got["total"] == 750


def test_fuse_table_rows_are_sorted_by_rate_then_mode() -> None:
    steps = [
        step("separate", 800, 0, 1, 1),
        step("fused", 400, 0, 2, 2),
        step("separate", 400, 0, 3, 3),
    ]
    res = BenchResult("fuse-verify", {}, {"steps": steps}, {}, {}, True)
    rows = fuse_table(res)
    assert [(r[0], r[1]) for r in rows] == [
        ("400", "fused"),
        ("400", "separate"),
        ("800", "separate"),
    ]
    assert rows[0][-1] == "2 (2 / 1 / 2 / 0)"


def test_paced_rates_compare_is_the_median_per_run_name_and_rate() -> None:
    from bench.paced_rates import compare

    def run_of(commit: str, label: str, total: float) -> dict[str, object]:
        s = step("", 400, 0, total, total / 2)
        s.pop("mode")
        return {"commit": commit, "label": label, "steps": [s]}

    got = compare(
        [run_of("abc1234", "", 900), run_of("abc1234", "", 1100), run_of("abc1234", "X=1", 500)]
    )
    assert got["abc1234"]["400"]["total"] == 1000 and got["abc1234 X=1"]["400"]["pipeline"] == 250


def test_paced_rates_compare_names_the_unpaced_step_burst() -> None:
    from bench.paced_rates import compare

    paced = step("", 800, 0, 1500, 900)
    burst = {**step("", 0, 0, 1000, 600), "burst": True}
    for s in (paced, burst):
        s.pop("mode")
    got = compare([{"commit": "abc1234", "label": "", "steps": [paced, burst]}])
    assert set(got["abc1234"]) == {"800", "burst"}
    assert got["abc1234"]["burst"]["pipeline"] == 600
