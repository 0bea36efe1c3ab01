"""The offline simulator on small synthetic traffic with stand-in models."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import replace
from typing import Any

import pytest

from models.data.columns import iter_events
from models.data.synthetic import SyntheticConfig, generate
from schemas.records import ImpressionEvent, RequestEvent
from store.tiers import Tier
from streams.engine.config import ENGINE_DEFAULTS, EngineConfig
from streams.engine.models import EngineModels
from streams.simulate.config import SimConfig
from streams.simulate.run import simulate
from streams.simulate.simulator import Simulator
from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM

DIM = 8


@pytest.fixture(scope="module")
def events() -> list[RequestEvent | ImpressionEvent]:
    traffic = generate(
        SyntheticConfig(n_users=60, n_items=400, days=3.0, k=20, seed=3, sessions_per_day=0.35)
    )
    return list(iter_events(traffic.requests, traffic.impressions))


def models() -> EngineModels:
    return EngineModels(FakeFM(DIM), FakeVM(), FakeSolaris(), FakeItems(DIM))


def config(**kw: object) -> SimConfig:
    return SimConfig(EngineConfig.defaults(DIM)).with_changes(**kw)


def test_first_request_of_a_user_never_gets_its_own_embeddings(
    events: list[RequestEvent | ImpressionEvent],
) -> None:
    sim = Simulator(config(use_neighbours=False), models())
    seen: set[int] = set()
    for ev in events:
        if isinstance(ev, RequestEvent) and ev.user_id not in seen:
            seen.add(ev.user_id)
            before = sim.coverage.counts.copy()
            sim.on_request(ev)
            delta = sim.coverage.counts - before
            assert delta[Tier.EXACT] == 0 and delta[Tier.AGGREGATE] == 0
        elif isinstance(ev, RequestEvent):
            sim.on_request(ev)
        else:
            sim.on_impression(ev)
    assert sim.coverage.counts[Tier.EXACT] > 0


def test_verifier_budget_halves_fm_cost(events: list[RequestEvent | ImpressionEvent]) -> None:
    full = Simulator(config(verify=False), models())
    full.run(events)
    half = Simulator(
        config(verifier=replace(ENGINE_DEFAULTS.verifier, top_fraction=0.5, rank_by="vm")), models()
    )
    half.run(events)
    assert half.speculation.embedded <= 0.5 * full.speculation.embedded + len(events)
    assert half.verifier is not None and half.verifier.stats.drop_rate > 0.3
    assert full.coverage.cumulative()["exact"] >= half.coverage.cumulative()["exact"]


def test_out_of_order_events_are_refused(events: list[RequestEvent | ImpressionEvent]) -> None:
    reqs = [e for e in events if isinstance(e, RequestEvent)]
    sim = Simulator(config(), models())
    sim.on_request(reqs[5])
    with pytest.raises(ValueError, match="out of event-time order"):
        sim.on_request(reqs[0])


def test_simulate_report_shape_and_oracle_bound(
    events: list[RequestEvent | ImpressionEvent],
) -> None:
    t_mid = [e.event_time_ms for e in events][len(events) // 2]
    cfg = config(
        test_start_ms=t_mid,
        speculator=replace(ENGINE_DEFAULTS.speculator, strategies=("candidates", "lookahead")),
    )
    report = simulate(lambda: events, cfg, models())
    for key in (
        "requests",
        "lookups",
        "coverage",
        "cumulative",
        "oracle",
        "fm_pairs_per_request",
        "fm_pairs_per_request_all_candidates",
        "speculation_precision",
        "speculation_efficiency",
        "labelled",
        "ne",
        "transfer_ratio_at_achieved",
        "random_same_budget",
        "foresight_same_budget",
    ):
        assert key in report, key
    assert set(report["coverage"]) == {
        "exact",
        "aggregate",
        "neighbour_item",
        "neighbour_aggregate",
        "state",
        "missing",
    }
    assert sum(report["coverage"].values()) == pytest.approx(1.0)
    cum, oracle = report["cumulative"], report["oracle"]
    assert cum["exact"] <= oracle["exact"] + 1e-9
    assert cum["exact"] <= cum["with_state"] <= cum["with_aggregate"]
    assert cum["with_aggregate"] <= cum["with_neighbour_item"]
    assert cum["with_neighbour_item"] <= cum["with_neighbours"] <= 1.0
    assert 0 < report["speculation_precision"] <= 1
    assert report["fm_pairs_per_request"] < report["fm_pairs_per_request_all_candidates"]
    assert set(report["labelled"]["oracle"]) == {
        "exact",
        "with_state",
        "with_aggregate",
        "with_neighbour_item",
        "with_neighbours",
    }
    assert report["ne"]["vm"]["ne"] > 0
    # knowing the future beats chance at the same budget, and never beats the oracle
    seer, rnd = report["foresight_same_budget"], report["random_same_budget"]
    assert rnd["cumulative"]["exact"] < seer["cumulative"]["exact"] <= oracle["exact"] + 1e-9
    assert seer["fm_pairs_per_request"] == pytest.approx(rnd["fm_pairs_per_request"], rel=0.1)


def test_simulation_is_deterministic(events: list[RequestEvent | ImpressionEvent]) -> None:
    cfg = dataclasses.replace(config(), use_neighbours=True)
    a, b = Simulator(cfg, models()), Simulator(cfg, models())
    a.run(events)
    b.run(events)
    assert a.coverage.counts.tolist() == b.coverage.counts.tolist()
    assert a.speculation.embedded == b.speculation.embedded


def test_a_slow_lookup_does_not_change_the_simulation(
    events: list[RequestEvent | ImpressionEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranker's 20 ms deadline is wall-clock: offline, a loaded machine must not turn a
    slow lookup into *missing* (test_simulation_is_deterministic failed once under load)."""
    cfg = dataclasses.replace(config(), use_neighbours=True)
    assert cfg.reader.deadline_ms <= 20.0
    want = Simulator(cfg, models())
    want.run(events)
    slow = Simulator(cfg, models())
    read, calls = slow.store.read, [0]

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] % 50 == 1:
            time.sleep(0.03)  # past the ranker's deadline
        return read(*args, **kwargs)

    monkeypatch.setattr(slow.store, "read", slow_read)
    slow.run(events)
    assert calls[0] > 1
    assert slow.coverage.counts.tolist() == want.coverage.counts.tolist()
    assert slow.reader.stats.timeouts == 0


def test_prior_ranked_verifier_runs_at_the_same_budget(
    events: list[RequestEvent | ImpressionEvent],
) -> None:
    vm = Simulator(
        config(verifier=replace(ENGINE_DEFAULTS.verifier, top_fraction=0.25, rank_by="vm")),
        models(),
    )
    prior = Simulator(
        config(verifier=replace(ENGINE_DEFAULTS.verifier, top_fraction=0.25, rank_by="prior")),
        models(),
    )
    vm.run(events)
    prior.run(events)
    assert prior.stages.prior is not None and vm.stages.prior is None
    assert (
        abs(prior.speculation.embedded - vm.speculation.embedded) <= 0.05 * vm.speculation.embedded
    )
    assert prior.coverage.total == vm.coverage.total


def test_growth_triggered_neighbour_refresh_fills_a_cold_index_sooner(
    events: list[RequestEvent | ImpressionEvent],
) -> None:

    def neighbour_coverage(growth: float) -> tuple[float, int]:
        # an interval longer than the trace: only the growth trigger can rebuild the index
        nb = replace(
            ENGINE_DEFAULTS.neighbours, k=4, interval_ms=10 * 86_400_000, growth_factor=growth
        )
        sim = Simulator(config(neighbours=nb), models())
        sim.run(events)
        shares = sim.coverage.shares()
        neighbours = shares["neighbour_item"] + shares["neighbour_aggregate"]
        assert sim.neighbours is not None
        return neighbours, sim.neighbours.clock.last_population

    interval_only, population_interval = neighbour_coverage(1.0)
    with_growth, population_growth = neighbour_coverage(2.0)
    assert population_interval == 0  # built once, at the first request, over nobody
    assert population_growth > 30  # rebuilt as users got aggregates
    assert interval_only == 0.0  # an empty index serves nobody
    assert with_growth > 0.02


def test_sweep_rows_per_ttl_budget_and_selector(
    events: list[RequestEvent | ImpressionEvent],
) -> None:
    from streams.simulate.sweep import sweep

    hour = 3_600_000
    out = sweep(lambda: events, config(), models(), fractions=(0.25,), ttls_ms=(hour, 4 * hour))
    got = {(r["ttl_ms"], r["selector"]) for r in out["rows"]}
    selectors = ("speculative", "vm", "random", "foresight")
    assert got == {(ttl, s) for ttl in (hour, 4 * hour) for s in selectors}
    assert set(out["oracle"]) == {str(hour), str(4 * hour)}
    for ttl in (hour, 4 * hour):
        row = {r["selector"]: r for r in out["rows"] if r["ttl_ms"] == ttl}
        assert row["foresight"]["cumulative"]["exact"] >= row["random"]["cumulative"]["exact"]
        assert row["foresight"]["efficiency"] <= 1.0 + 1e-9


def test_a_message_whose_fm_output_is_not_finite_is_refused_whole_like_live(
    events: list[RequestEvent | ImpressionEvent],
) -> None:
    """The simulator applies the live embed step's output check: a user whose FM output
    overflows float16 gets nothing stored (live dead-letters the message), every other user's
    pairs are stored exactly as in a run without that user's overflow."""
    import numpy as np

    from tests.fakes import FakeFM

    bad_user = next(e.user_id for e in events if isinstance(e, RequestEvent))

    class OverflowFM(FakeFM):
        def embed(self, user_ids, item_ids, event_time_ms, histories):  # type: ignore[no-untyped-def]
            emb, logit = super().embed(user_ids, item_ids, event_time_ms, histories)
            emb[np.asarray(user_ids) == bad_user] = 1e6  # not finite as float16
            return emb, logit

    cfg = config(use_neighbours=False)
    plain = Simulator(cfg, models())
    plain.run(events)
    bad = Simulator(cfg, dataclasses.replace(models(), fm=OverflowFM(DIM)))
    bad.run(events)
    assert bad.refused_outputs > 0 and plain.refused_outputs == 0
    tag = f":{{u{bad_user}}}:".encode()
    stored_bad = {k: v for k, (_, v) in bad.store._data.items()}
    stored_plain = {k: v for k, (_, v) in plain.store._data.items()}
    assert not [k for k in stored_bad if tag in k and (b":p:" in k or k.endswith(b":agg"))]
    others = {k: v for k, v in stored_plain.items() if tag not in k and b":nb" not in k}
    assert others == {k: v for k, v in stored_bad.items() if tag not in k and b":nb" not in k}


def test_pairs_the_fm_failed_on_are_proposed_again_after_the_in_flight_timeout() -> None:
    """Issue 24: the FM's output for a request is refused (not finite), so none of its pairs
    is stored; the user's next request 45 min later (in-flight timeout 30 min, refresh after
    2 h) embeds them again. With the rule off (timeout = refresh_after) they stayed marked as
    embedded and nothing was stored for 2 h."""
    import numpy as np

    minute = 60_000
    t0, items = 1_700_000_000_000, (11, 12, 13, 14, 15)
    failed: list[int] = []

    class FailingFirstFM(FakeFM):
        def embed(self, user_ids, item_ids, event_time_ms, histories):  # type: ignore[no-untyped-def]
            emb, logit = super().embed(user_ids, item_ids, event_time_ms, histories)
            early = np.asarray(event_time_ms) < t0 + minute
            failed.extend(np.asarray(item_ids)[early].tolist())
            emb[early] = 1e6  # not finite as float16: the message is refused, nothing stored
            return emb, logit

    events: list[RequestEvent | ImpressionEvent] = [
        RequestEvent("r0", 1, t0, "feed", items),
        RequestEvent("r1", 1, t0 + 45 * minute, "feed", items),
    ]

    def stored(in_flight_ms: int) -> set[int]:
        base = config(use_neighbours=False, verify=False)
        spec = replace(base.engine.speculator, in_flight_ms=in_flight_ms)
        sim = Simulator(
            base.with_changes(speculator=spec), replace(models(), fm=FailingFirstFM(DIM))
        )
        failed.clear()
        sim.run(events)
        assert sorted(failed) == sorted(items) and sim.refused_outputs == 1
        return {int(k.rsplit(b":", 1)[1]) for k in sim.store._data if b":p:" in k}

    assert stored(30 * minute) == set(items)
    assert stored(ENGINE_DEFAULTS.speculator.refresh_after_ms) == set()
