"""Table expiry (issue 24 item 5): the dead-value rule, and that deleting dead users is
invisible in every output of the simulator (values, not counts)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from models.data.columns import iter_events
from models.data.synthetic import SyntheticConfig, generate
from schemas.records import ImpressionEvent, PairEmbedding, RequestEvent
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.config import EngineConfig
from streams.engine.models import EngineModels
from streams.engine.state import AGGREGATES, LEDGER
from streams.engine.steps import expiry
from streams.engine.steps.verify import LedgerState
from streams.settings import Settings
from streams.simulate.config import SimConfig
from streams.simulate.simulator import Simulator
from tests.fakes import FakeFM, FakeItems, FakeSolaris, FakeVM

DIM = 8
HOUR = 3_600_000


def test_a_value_is_dead_only_past_its_lifetime_and_the_grace() -> None:
    assert not expiry.is_dead(1_000, 1_000 + 10 + 5, lifetime_ms=10, grace_ms=5)
    assert expiry.is_dead(1_000, 1_000 + 10 + 5 + 1, lifetime_ms=10, grace_ms=5)
    assert not expiry.is_dead(None, 10**12, lifetime_ms=0, grace_ms=0)  # no age: kept


def test_the_lifetimes_are_the_pair_ttl_and_the_aggregate_window() -> None:
    cfg = EngineConfig.from_settings(Settings.model_construct(), DIM)
    life = expiry.lifetimes(cfg)
    assert life["ledger"] == max(cfg.pair_ttl_ms, cfg.speculator.refresh_after_ms)
    assert life["aggregates"] == cfg.aggregate_window_ms
    assert cfg.table_expiry_grace_ms == Settings.model_construct().table_expiry_grace_ms


def test_newest_time_of_a_table_value_equals_its_decoded_states() -> None:
    ledger = LedgerState({5: 7_000, 9: 9_500}, ["r1"])
    assert expiry.ledger_newest_ms(LEDGER.dump(ledger)) == expiry.state_newest_ms(ledger) == 9_500
    assert expiry.ledger_newest_ms([[3, 40]]) == 40  # the old list-only value
    assert expiry.ledger_newest_ms(LEDGER.dump(LedgerState())) is None
    state = AggregateState()
    emb = PairEmbedding.from_array(1, 2, 12 * HOUR, "v1", np.ones(4, np.float32))
    RollingAggregator(24 * HOUR, HOUR).add(state, [emb])
    assert expiry.aggregates_newest_ms(AGGREGATES.dump(state)) == 12 * HOUR
    assert expiry.state_newest_ms(state) == 12 * HOUR
    assert expiry.aggregates_newest_ms(AGGREGATES.dump(AggregateState())) is None


def test_dead_users_are_judged_per_table() -> None:
    cfg = EngineConfig.defaults(DIM).with_changes(table_expiry_grace_ms=HOUR)
    now = 100 * HOUR
    young = {"pairs": [[1, now - cfg.pair_ttl_ms]], "requests": []}
    old = {"pairs": [[1, now - cfg.pair_ttl_ms - HOUR - 1]], "requests": []}
    assert expiry.dead_users("ledger", [(1, young), (2, old), (3, None)], now, cfg) == [2]


def test_a_representation_past_the_horizon_is_started_afresh_refresh_or_not() -> None:
    """What a returning user's representation becomes depends on event times only: not on
    whether a refresh forgot it in memory, nor on whether its saved value was deleted."""
    from streams.engine.neighbours import UserRepresentations
    from streams.engine.steps.speculate import observe_representation
    from tests.unit.test_neighbour_similarity import SharedDirectionItems

    horizon = 10_000
    first = RequestEvent("r1", 7, 1_000, "feed", (1, 2, 3))
    back = RequestEvent("r2", 7, 1_000 + horizon + 1, "feed", (4, 5))
    kept = UserRepresentations(SharedDirectionItems())
    saved = observe_representation(kept, first, None, horizon)
    after_restart = UserRepresentations(SharedDirectionItems())  # memory empty, value saved
    deleted = UserRepresentations(SharedDirectionItems())  # the saved value swept
    a = observe_representation(kept, back, saved, horizon)
    b = observe_representation(after_restart, back, saved, horizon)
    c = observe_representation(deleted, back, None, horizon)
    assert a is not None and b is not None and c is not None
    assert a.vector == b.vector == c.vector
    within = RequestEvent("r2", 7, 1_000 + horizon, "feed", (4, 5))
    blended = observe_representation(
        UserRepresentations(SharedDirectionItems()), within, saved, horizon
    )
    assert blended is not None and blended.vector != c.vector  # inside the horizon: blended


# --- invisible in the simulator --------------------------------------------------------------


@pytest.fixture(scope="module")
def events() -> list[RequestEvent | ImpressionEvent]:
    """Users coming back after one to several days: many ledgers and aggregates go dead."""
    traffic = generate(
        SyntheticConfig(n_users=80, n_items=300, days=6.0, k=20, seed=11, sessions_per_day=0.5)
    )
    return list(iter_events(traffic.requests, traffic.impressions))


def _run(events: list[Any], grace_ms: int) -> Simulator:
    engine = EngineConfig.defaults(DIM)
    # a 1-day neighbour horizon: representations go dead within the 6 days too
    reader = dataclasses.replace(engine.reader, neighbour_aggregate_ttl_ms=24 * HOUR)
    engine = engine.with_changes(table_expiry_grace_ms=grace_ms, reader=reader)
    models = EngineModels(FakeFM(DIM), FakeVM(), FakeSolaris(), FakeItems(DIM))
    start = events[len(events) // 2].event_time_ms
    sim = Simulator(SimConfig(engine, test_start_ms=start), models)
    sim.run(events)
    return sim


def _outputs(sim: Simulator) -> dict[str, Any]:
    """Everything a run produced: what it stored, what it served, what it would evaluate."""
    store = getattr(sim.store, "_data")  # noqa: B009 — the in-memory store's values and expiries
    assert sim.eval is not None
    return {
        "store": dict(store),
        "coverage": sim.coverage.counts.tolist(),
        "labelled": sim.labelled.counts.tolist(),
        "tiers": list(sim.eval.tiers),
        "vectors": [v.tobytes() for v in sim.eval.vectors],
        "refused": sim.refused_outputs,
    }


def test_deleting_dead_users_changes_no_output(events: list[Any]) -> None:
    swept = _run(events, grace_ms=HOUR)
    never = _run(events, grace_ms=10**15)  # nothing is ever dead
    assert min(swept.expired.values()) > 20, swept.expired
    assert never.expired == {"ledger": 0, "aggregates": 0, "reps": 0, "recent": 0}
    assert len(swept.ledgers) < len(never.ledgers)  # memory follows the active users
    assert len(swept.agg_states) < len(never.agg_states)
    assert len(swept.saved_reps) < len(never.saved_reps)
    assert len(swept.pair_memory) < len(never.pair_memory)
    assert _outputs(swept) == _outputs(never)


@pytest.mark.parametrize("cut", ["ledger", "recent"])
def test_the_comparison_catches_a_rule_that_deletes_live_state(
    events: list[Any], monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """A lifetime shorter than the pair TTL deletes ledgers whose pairs are still fresh (pairs
    are embedded again); one shorter than the pair memory's window deletes candidate lists
    that still count (other pairs are kept): the runs differ, so the test above can fail."""
    never = _outputs(_run(events, grace_ms=10**15))
    lives = {"ledger": 10**15, "aggregates": 10**15, "reps": 10**15, "recent": 10**15, cut: 0}
    monkeypatch.setattr(expiry, "lifetimes", lambda cfg: lives)
    assert _outputs(_run(events, grace_ms=0)) != never


# --- the live sweep's own rules (a dict stands in for the Faust table) -----------------------


class DictTable(dict[int, Any]):
    """A dict with the two parts of a Faust table that ``read_table`` uses."""

    @property
    def data(self) -> DictTable:
        return self

    def on_key_get(self, key: int) -> None:
        return None


def _sweeper(table: dict[int, Any], partitions: int = 4) -> Any:
    from streams.live.table_clocks import PartitionClocks
    from streams.live.table_expiry import TableSweeper

    cfg = EngineConfig.defaults(DIM).with_changes(table_expiry_grace_ms=HOUR)
    return TableSweeper("ledger", table, PartitionClocks(), cfg, ("t.speculated", partitions))


def test_the_sweep_judges_each_user_by_its_own_partitions_clock() -> None:
    import asyncio

    cfg = EngineConfig.defaults(DIM)
    dead_at = cfg.pair_ttl_ms + HOUR + 1  # past the lifetime and the grace
    table = DictTable({u: {"pairs": [[1, 0]], "requests": []} for u in range(40)})
    sweeper = _sweeper(table)
    by_partition: dict[int, list[int]] = {}
    for u in table:
        by_partition.setdefault(sweeper.partition_of(u), []).append(u)
    ahead, behind, unseen = sorted(by_partition)[:3]
    sweeper.clocks.saw("ledger", ahead, dead_at)
    sweeper.clocks.saw("ledger", behind, dead_at - 2)  # within the grace: nobody dead here
    expired = asyncio.run(sweeper.sweep(_no_deliveries))
    assert expired == len(by_partition[ahead])
    assert not set(by_partition[ahead]) & set(table)
    assert set(by_partition[behind]) <= set(table)
    assert set(by_partition[unseen]) <= set(table)  # no clock for it here: never swept


def test_a_value_saved_since_the_keys_were_listed_is_judged_as_it_is_now() -> None:
    table = DictTable({7: {"pairs": [[1, 0]], "requests": []}})
    sweeper = _sweeper(table)
    now = EngineConfig.defaults(DIM).pair_ttl_ms + 2 * HOUR
    sweeper.clocks.saw("ledger", sweeper.partition_of(7), now)
    table[7] = {"pairs": [[1, now]], "requests": []}  # an agent saved a new value
    assert not sweeper.expire_if_dead(7) and 7 in table
    table[7] = {"pairs": [[1, 0]], "requests": []}
    assert sweeper.expire_if_dead(7) and 7 not in table


async def _no_deliveries() -> None:
    return None
