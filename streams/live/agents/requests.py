"""requests → speculate (proposals to ``speculated``), user representations, neighbour refresh.

The neighbour refresh runs here because it is driven by the event-time clock of requests: at
each request it runs first if due, exactly where the simulator runs it.
"""

from __future__ import annotations

from typing import Any

import faust

from schemas.records import RequestEvent
from streams.engine.steps.speculate import SavedRep, observe_representation, speculate
from streams.live import metrics
from streams.live.agents.context import AgentContext
from streams.live.neighbours_job import NeighbourRefresher
from streams.live.state import history_from_table, ledger_from_table


def register(ctx: AgentContext, refresher: NeighbourRefresher | None) -> None:
    ledger, history, reps = ctx.tables["ledger"], ctx.tables["history"], ctx.tables["reps"]
    parts = ctx.parts

    async def on_request(rec: RequestEvent) -> Any:
        """One request's step; returns the delivery of its proposals (or None)."""
        parts.now_ms = max(parts.now_ms, rec.event_time_ms)
        if refresher is not None:
            await refresher.maybe_refresh(rec.event_time_ms, ctx.tables["aggregates"], reps)
        entries = history_from_table(history.get(rec.user_id))
        batch = speculate(
            rec, ledger_from_table(ledger.get(rec.user_id)).pairs, entries, parts.stages
        )
        if parts.stages.reps is not None:
            saved = SavedRep.from_json(reps.get(rec.user_id))
            new = observe_representation(parts.stages.reps, rec, saved)
            if new is not None:
                reps[rec.user_id] = new.to_json()
        if batch is None:
            return None
        for strategy in batch.strategies:
            metrics.PROPOSALS.labels(strategy).inc()
        return await ctx.send("speculated", rec.user_id, batch, rec.event_time_ms)

    @ctx.app.agent(ctx.topics["requests"], concurrency=1, name="speculate")
    async def on_requests(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            pending = []
            for event in events:
                rec = await ctx.admitted(event, RequestEvent)
                if rec is None:
                    continue
                async with ctx.processing(event):
                    pending.append(await on_request(rec))
            for delivery in pending:  # once per batch, before Faust acks the batch
                if delivery is not None:
                    await delivery
