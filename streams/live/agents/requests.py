"""requests → speculate (proposals to ``speculated``), user representations, neighbour refresh.

The neighbour refresh runs here because it is driven by the event-time clock of requests: at
each request it runs first if due, exactly where the simulator runs it.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

import faust

from schemas.records import RequestEvent
from streams.engine.stages import undone_on_error
from streams.engine.state import REPS, aggregate_confirmed
from streams.engine.steps.speculate import observe_representation, speculate
from streams.live import metrics
from streams.live.agents.context import AgentContext
from streams.live.neighbours_job import NeighbourRefresher
from streams.live.state import BatchState, history_from_table, ledger_from_table


class RequestsBatch:
    """One batch's table state: history and ledger read once per user (the batch runs without
    yielding to the agents that write them), representations written once per user."""

    def __init__(self, ctx: AgentContext) -> None:
        t = ctx.tables
        self.history = BatchState(t["history"], history_from_table)
        self.ledger = BatchState(t["ledger"], ledger_from_table)
        #: the embeddings that came back (the aggregates table's record), read only if needed
        self.confirmed = BatchState(t["aggregates"], aggregate_confirmed)
        self.reps = BatchState(t["reps"], REPS.load, REPS.dump)
        self.proposals: collections.Counter[str] = collections.Counter()  #: per strategy

    def save(self, proposals: Any) -> None:
        """Write the representations; count the proposals (one increment per strategy)."""
        self.reps.save()
        for strategy, n in self.proposals.items():
            proposals(strategy).inc(n)


def register(ctx: AgentContext, refresher: NeighbourRefresher | None) -> None:
    parts = ctx.parts
    proposals = metrics.bound(metrics.PROPOSALS)
    horizon_ms = parts.config.reader.neighbour_aggregate_ttl_ms

    async def on_request(rec: RequestEvent, state: RequestsBatch, event: Any) -> Any:
        """One request's step; returns the delivery of its proposals (or None)."""
        parts.now_ms = max(parts.now_ms, rec.event_time_ms)
        parts.table_clocks.saw("reps", event.message.partition, rec.event_time_ms)
        if refresher is not None:
            await refresher.maybe_refresh(
                rec.event_time_ms, ctx.tables["aggregates"], ctx.tables["reps"]
            )
        entries = state.history.get(rec.user_id)
        user = rec.user_id
        confirmed = functools.partial(state.confirmed.get, user)  # in this event's partition
        batch = speculate(rec, state.ledger.get(user).pairs, confirmed, entries, parts.stages)
        reps = parts.stages.reps
        if reps is not None:
            before = reps.foreign
            new = observe_representation(reps, rec, state.reps.get(rec.user_id), horizon_ms)
            metrics.count_foreign_resets(reps.foreign - before, "representation")
            if new is not None:
                state.reps.put(rec.user_id, new, event)
        if batch is None:
            return None
        state.proposals.update(batch.strategies)
        return await ctx.send("speculated", rec.user_id, batch, rec.event_time_ms)

    @ctx.app.agent(ctx.topics["requests"], concurrency=1, name="speculate")
    async def on_requests(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await ctx.finish("speculate", on_batch, events)

    async def on_batch(events: list[Any]) -> None:
        """Speculate every request; state is saved only once the proposals are delivered, and
        the in-process state (prior, representations) is undone on an error, so a batch run
        again after a failed delivery starts from the same state."""
        pending = []
        state = RequestsBatch(ctx)
        with undone_on_error(parts.stages):
            for event in events:
                rec = await ctx.admitted(event, RequestEvent)
                if rec is None:
                    continue
                async with ctx.processing(event):
                    pending.append(await on_request(rec, state, event))
            for delivery in pending:  # once per batch, before Faust acks the batch
                if delivery is not None:
                    await delivery
            state.save(proposals)
