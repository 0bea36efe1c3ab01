"""The demo report from a summary dict (no services): one self-contained page, every figure a
decodable PNG of real size, figures that still render (with a note) when the run recorded less;
the sweep plot's default path."""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from streams.engine.config import EngineConfig

pytest.importorskip("matplotlib", reason="matplotlib comes with the train extra")

from store.tiers import TIER_NAMES
from streams.app.report_html.page import render, write_report
from streams.app.report_html.plots import FIGURES, _intervals

CUM = {
    "exact": 0.4,
    "with_state": 0.6,
    "with_aggregate": 0.7,
    "with_neighbour_item": 0.8,
    "with_neighbours": 0.9,
}


def _sample(t: float, requests: int, lag: int) -> dict[str, Any]:
    weights = (0.3, 0.3, 0.1, 0.1, 0.1, 0.1)
    return {
        "t_s": t,
        "replayed": requests,
        "lag": {"solaris-x-pipeline": lag, "solaris-x-fm": lag // 2, "solaris-x-ranker": 0},
        "requests": requests,
        "lookups": {n: int(requests * 50 * w) for n, w in zip(TIER_NAMES, weights, strict=True)},
        "embedded": requests * 12,
    }


def full_summary() -> dict[str, Any]:
    return {
        "requests": 4000,
        "cumulative": CUM,
        "fm_pairs_per_request": 12.0,
        "speculation_precision": 0.3,
        "dead_letters": {},
        "read_ms": {"p50": 0.8, "p99": 2.1},
        "max_consumer_lag": 90,
        "replay": {"messages": 30000, "requests": 4000, "seconds": 92.0, "rate": 326.0},
        "mode": "timed, speed 1000",
        # requests published every 200: samples with no new requests must be skipped
        "timeline": [_sample(i, (i * 80) // 200 * 200, i % 9 * 10) for i in range(51)],
        "offline": {"cumulative": CUM, "fm_pairs_per_request": 12.3, "speculation_precision": 0.31},
        "read_latency": {
            "buckets": [[0.001, 3000.0], [0.002, 3900.0], [0.005, 4000.0], [float("inf"), 4000.0]]
        },
        "quality": {
            "ne": {"vm": 0.82, "vm_solaris_served": 0.81, "fm": 0.78},
            "ne_ci": {"vm": [0.81, 0.83], "vm_solaris_served": [0.8, 0.82], "fm": [0.77, 0.79]},
            "transfer_ratio": 0.25,
            "transfer_ratio_ci": [0.1, 0.4],
            "impressions": 24000,
        },
    }


def png_sizes(page: str) -> list[tuple[int, int]]:
    """Width and height (from the IHDR chunk) of every inline PNG image of ``page``."""
    sizes = []
    for data in re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', page):
        raw = base64.b64decode(data)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n"
        sizes.append(struct.unpack(">II", raw[16:24]))
    return sizes


def test_report_is_one_self_contained_page_with_every_figure(tmp_path: Path) -> None:
    path = write_report(full_summary(), tmp_path / "sub" / "report.html")
    page = path.read_text()
    assert path.is_absolute()
    sizes = png_sizes(page)
    assert len(sizes) == len(FIGURES) == 6
    assert all(w >= 300 and h >= 150 for w, h in sizes)
    for anchor, caption, _ in FIGURES:
        assert f'id="{anchor}"' in page and caption in page
    # nothing fetched from elsewhere: no external src/href, no stylesheet or script links
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "0.400" in page and "12.30" in page  # live and offline columns of the table


def test_figures_render_with_a_note_when_the_run_recorded_less() -> None:
    bare = {"requests": 0, "cumulative": CUM, "fm_pairs_per_request": 0.0}
    bare["speculation_precision"] = 0.0
    page = render(bare)
    assert len(png_sizes(page)) == len(FIGURES)


def test_intervals_skip_samples_without_new_requests() -> None:
    samples = [_sample(0, 0, 0), _sample(1, 0, 0), _sample(2, 200, 0), _sample(3, 200, 0)]
    samples.append(_sample(4, 400, 0))
    pairs = _intervals(samples)
    assert [(a["t_s"], b["t_s"]) for a, b in pairs] == [(0, 2), (2, 4)]


def test_sweep_png_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.cli.simulate_cmd import sweep_png_path

    monkeypatch.chdir(tmp_path)
    assert sweep_png_path(None, None, "synthetic") == tmp_path / "out" / "sweep-synthetic.png"
    assert (tmp_path / "out").is_dir()
    assert sweep_png_path(None, Path("r/x.json"), "d") == tmp_path / "r" / "x.png"
    assert sweep_png_path(Path("p.png"), Path("r/x.json"), "d") == tmp_path / "p.png"


def test_sweep_plot_writes_a_png_at_the_default_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streams.cli.simulate_cmd import sweep_png_path
    from streams.simulate.sweep import plot

    monkeypatch.chdir(tmp_path)
    cov = {"exact": 0.3, "with_aggregate": 0.5}
    rows = [
        {"ttl_ms": 3_600_000, "selector": s, "fm_pairs_per_request": x, "cumulative": cov}
        | {"labelled": cov}
        for s in ("speculative", "random")
        for x in (1.0, 2.0)
    ]
    result = {"rows": rows, "oracle": {"3600000": {"cumulative": cov, "labelled": cov}}}
    out = plot(result, sweep_png_path(None, None, "tiny"), "tiny")
    assert out is not None and out.read_bytes()[:4] == b"\x89PNG"


# --- the demo's latency-matched simulator (streams.app.demo_offline) ---------------------------


def _latency_events() -> list[Any]:
    from models.data.columns import iter_events
    from models.data.synthetic import SyntheticConfig, generate

    traffic = generate(
        SyntheticConfig(n_users=40, n_items=300, days=2.0, k=20, seed=4, sessions_per_day=0.5)
    )
    return list(iter_events(traffic.requests, traffic.impressions))


def _sim(delay_ms: int | None) -> Any:
    from streams.engine.models import EngineModels
    from streams.simulate.config import SimConfig
    from streams.simulate.latency import ConstantDelay
    from streams.simulate.simulator import Simulator
    from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM

    models = EngineModels(FakeFM(8), FakeVM(), FakeSolaris(), FakeItems(8))
    config = SimConfig(EngineConfig.defaults(8))
    if delay_ms is None:
        return Simulator(config, models)
    return Simulator(config, models, delays=ConstantDelay(delay_ms))


def test_latency_simulator_at_zero_delay_is_the_simulator() -> None:
    events = _latency_events()
    plain, zero = _sim(None), _sim(0)
    plain.run(events)
    zero.run(events)
    assert plain.coverage.counts.tolist() == zero.coverage.counts.tolist()
    assert plain.labelled.counts.tolist() == zero.labelled.counts.tolist()
    assert plain.speculation.embedded == zero.speculation.embedded
    # values, not only counts: the same bytes stored under the same keys
    stored = {k: v for k, (_, v) in plain.store._data.items()}
    assert stored == {k: v for k, (_, v) in zero.store._data.items()}


def test_a_delayed_pipeline_still_stores_the_histories_a_fair_vm_reads() -> None:
    """The late history step is the simulator's own (the copy in the old latency simulator
    updated the history but never stored it for a vm_solaris with streaming user features)."""
    from dataclasses import replace

    from streams.simulate.latency import ConstantDelay
    from streams.simulate.simulator import Simulator
    from tests.fakes import FakeSolaris

    class FairSolaris(FakeSolaris):
        user_features = True

    base = _sim(None)
    models = replace(base.models, solaris=FairSolaris())
    sim = Simulator(base.config, models, delays=ConstantDelay(60_000))
    sim.run(_latency_events())
    assert sum(1 for k in sim.store._data if k.endswith(b":h")) > 10


def test_latency_lowers_exact_coverage() -> None:
    """The further the pipeline trails the reads (event time), the less exact coverage."""
    from store.tiers import Tier

    events = _latency_events()
    exact = []
    for delay in (0, 60_000, 3_600_000):
        sim = _sim(delay)
        sim.run(events)
        exact.append(int(sim.coverage.counts[Tier.EXACT]))
    assert exact[0] > exact[1] > exact[2] >= 0


def _measured(events: list[Any], request_ms: Any, verify_ms: Any) -> Any:
    """MeasuredDelays with every request measured: ``request_ms(r)`` / ``verify_ms(r)``."""
    from schemas.records import RequestEvent
    from streams.app.demo_offline import MeasuredDelays

    reqs = [e for e in events if isinstance(e, RequestEvent)]
    return MeasuredDelays(
        {r.request_id: request_ms(r) for r in reqs},
        {r.request_id: verify_ms(r) for r in reqs},
        {r.request_id: r.event_time_ms for r in reqs},
    )


def _run(events: list[Any], delays: Any) -> Any:
    from streams.simulate.latency import ConstantDelay
    from streams.simulate.simulator import Simulator

    base = _sim(0)
    schedule = ConstantDelay(delays) if isinstance(delays, int) else delays
    sim = Simulator(base.config, base.models, delays=schedule)
    sim.run(events)
    return sim


def test_measured_delays_all_equal_are_the_constant_delay() -> None:
    """Every request and impression measured at 60 s = the constant 60 s schedule, count for
    count (the heap keeps the FIFO's order when delays are equal)."""
    events = _latency_events()
    const = _run(events, 60_000)
    measured = _run(events, _measured(events, lambda r: 60_000, lambda r: 60_000))
    assert const.coverage.counts.tolist() == measured.coverage.counts.tolist()
    assert const.labelled.counts.tolist() == measured.labelled.counts.tolist()
    assert const.speculation.embedded == measured.speculation.embedded


def test_measured_delays_are_per_request() -> None:
    """Delaying only half of the requests lands between no delay and delaying them all."""
    from store.tiers import Tier

    events = _latency_events()
    hour = 3_600_000
    exact = [
        int(_run(events, _measured(events, f, lambda r: 0)).coverage.counts[Tier.EXACT])
        for f in (lambda r: 0, lambda r: hour * (sum(map(ord, r.request_id)) % 2), lambda r: hour)
    ]
    assert exact[0] > exact[1] > exact[2]


def test_measured_delays_fall_back_to_the_newest_measured_request() -> None:
    from schemas.records import ImpressionEvent, RequestEvent
    from streams.app.demo_offline import MeasuredDelays

    d = MeasuredDelays({"a": 5_000, "c": 9_000}, {"a": 100, "b": 300}, {"a": 10, "b": 20, "c": 30})

    def req(rid: str, t: int) -> RequestEvent:
        return RequestEvent(rid, 1, t, "home", (1,))

    def imp(t: int) -> ImpressionEvent:
        return ImpressionEvent("x", 1, 1, t, 0, 1)

    assert d.request_ms(req("c", 30)) == 9_000  # its own
    assert d.request_ms(req("b", 20)) == 5_000  # not embedded: newest embedded before it ("a")
    assert d.request_ms(req("z", 5)) == 5_000  # before any: the first one measured
    assert d.impression_ms(imp(25)) == 300  # the pipeline worker's delay then ("b")
    assert d.impression_ms(imp(15)) == 100
    assert d.median_ms() == 7_000
    assert d.summary_s()["embedded"] == {"n": 2, "p50": 9.0, "p90": 9.0, "max": 9.0}


def test_arrivals_keep_the_first_and_never_go_negative() -> None:
    from streams.app.demo_delays import Arrivals

    arr = Arrivals()
    arr.add("embeddings", "a", 1_000, 61_000, 80_000)
    arr.add("embeddings", "a", 1_000, 99_000, 99_000)  # a redelivery: the first arrival counts
    arr.add("verified", "a", 1_000, 2_000, 3_000)
    arr.add("verified", "b", 5_000, 4_000, 6_000)  # the ranker had not scored "b" yet
    d = arr.delays()
    assert dict(d.embedded) == {"a": 60_000}
    assert dict(d.verified) == {"a": 1_000, "b": 0}
    assert dict(d.times) == {"a": 1_000, "b": 5_000}
    on_replay = arr.delays("replay")
    assert dict(on_replay.embedded) == {"a": 79_000}
    assert dict(on_replay.verified) == {"a": 2_000, "b": 1_000}


def test_arrivals_round_trip_through_json(tmp_path: Path) -> None:
    from streams.app.demo_delays import Arrivals

    arr = Arrivals()
    arr.add("embeddings", "a", 1_000, 61_000, 80_000)
    arr.add("verified", "b", 5_000, 4_000, 6_000)
    back = Arrivals.read(arr.write(tmp_path / "arrivals.json"))
    assert back.by_topic == arr.by_topic


def test_arrivals_fall_back_to_the_replay_clock_without_scores(tmp_path: Path) -> None:
    """A ranker that wrote no scores leaves its clock at 0: every delay would read 0 (the
    lockstep simulator), so the replay's clock is used instead."""
    from streams.app.demo_delays import Arrivals

    arr = Arrivals()
    arr.add("embeddings", "a", 1_000, 0, 80_000)
    assert dict(arr.outputs(tmp_path, timed=True)["request_delays"].embedded) == {"a": 79_000}
    arr.scored = 3
    arr.add("embeddings", "b", 2_000, 30_000, 90_000)
    assert dict(arr.outputs(tmp_path, timed=True)["request_delays"].embedded)["b"] == 28_000
    assert arr.outputs(tmp_path, timed=False)["request_delays"] is None
