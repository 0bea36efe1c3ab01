"""The agents rebuild the counts they derive from their tables (the item prior from ``recent``,
the look-ahead from ``history``) at the first batch of each consumer generation, under Faust's
``test_context`` (the harness of ``test_agents``)."""

from __future__ import annotations

import faust
import pytest

from schemas.records import ImpressionEvent, RequestEvent
from streams.live.components import Components
from tests.unit.test_agents import T0, Sent, put, run, table_data


def test_the_item_prior_is_rebuilt_from_the_recent_table_after_a_start_or_a_rebalance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The speculate agent rebuilds the item prior from the pair memories of its tables at its
    first batch and at the first batch of each new consumer generation, and only then."""
    from streams.engine.recurrence import ItemPrior
    from streams.engine.state import RECENT

    def from_table(app: faust.App, parts: Components) -> ItemPrior:
        rebuilt = ItemPrior(parts.config.verifier.pair_memory_ms)
        rebuilt.rebuild(RECENT.load(v) for v in table_data(app, "recent").values())
        return rebuilt

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc, prior = parts.codec.encode, parts.stages.prior
        assert isinstance(prior, ItemPrior)
        reqs = [RequestEvent(f"r{n}", 7 + n % 2, T0 + n, "feed", (1, 2, 3 + n)) for n in range(4)]
        await put(app, "speculate", [enc(r) for r in reqs])
        assert prior == from_table(app, parts) and prior.raw_counts([1]).tolist() == [4.0]
        prior.rebuild([])  # a prior that lost its counts is not rebuilt within a generation
        await put(app, "speculate", [enc(RequestEvent("r4", 7, T0 + 4, "feed", (1, 9)))])
        assert prior.raw_counts([1]).tolist() == [1.0]
        app.consumer_generation_id += 1  # a rebalance
        await put(app, "speculate", [enc(RequestEvent("r5", 8, T0 + 5, "feed", (1, 9)))])
        assert prior == from_table(app, parts) and prior.raw_counts([1, 9]).tolist() == [6.0, 2.0]

    run(body, monkeypatch)


def test_the_lookahead_is_rebuilt_from_the_history_table_after_a_rebalance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the look-ahead strategy, the history agent's counts follow the history table and
    are rebuilt from it at the first batch of a new consumer generation, and only then."""
    from streams.engine.lookahead import Lookahead
    from streams.engine.state import HISTORY

    def from_table(app: faust.App) -> Lookahead:
        rebuilt = Lookahead()
        rebuilt.rebuild(HISTORY.load(v) for v in table_data(app, "history").values())
        return rebuilt

    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc, la = parts.codec.encode, parts.stages.lookahead
        assert isinstance(la, Lookahead)
        imps = [ImpressionEvent(f"r{n}", 7, 10 + n, T0 + n, n, 1) for n in range(3)]
        await put(app, "history", [enc(i) for i in imps])
        assert la == from_table(app) and la.covisit.neighbours(10, 5) == [11, 12]
        la.rebuild([])  # counts lost in the process are not rebuilt within a generation
        await put(app, "history", [enc(ImpressionEvent("r3", 7, 13, T0 + 3, 3, 1))])
        assert la.covisit.neighbours(10, 5) == [13]  # only the new co-visit: not rebuilt
        app.consumer_generation_id += 1  # a rebalance
        await put(app, "history", [enc(ImpressionEvent("r4", 7, 14, T0 + 4, 4, 0))])
        assert la == from_table(app) and la.covisit.neighbours(12, 5) == [10, 11, 13]

    run(body, monkeypatch, speculation_strategies="candidates,lookahead")
