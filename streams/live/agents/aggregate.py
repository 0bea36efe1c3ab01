"""embeddings → rolling 24 h user aggregates (table ``aggregates``) → store.

Per batch: every message updates its user's state in event order, the batch's aggregates go to
the store in one write, and only then is state saved — a crash in between re-adds the same
pairs and writes the same aggregates again (idempotent).

A message that fails (for one, an embedding of this worker's FM version whose dim is not that
FM's: the aggregator's :func:`~streams.engine.aggregator.check_model_dim`, the same rule in
the simulator) is dead-lettered alone
(``processing_error``). Messages of another model version are accepted; they restart the user's
buckets (see :mod:`streams.engine.aggregator`).
"""

from __future__ import annotations

from typing import Any

import faust

from schemas.records import EmbeddingBatch, UserAggregate
from streams.engine.aggregator import AggregateState
from streams.engine.state import AGGREGATES
from streams.live import metrics
from streams.live.agents.context import AgentContext, as_current
from streams.live.retry import write_with_retry


def register(ctx: AgentContext) -> None:
    table, parts, settings = ctx.tables["aggregates"], ctx.parts, ctx.settings
    aggregator = parts.stages.aggregator

    async def aggregate_batch(events: list[Any]) -> None:
        states: dict[int, tuple[Any, AggregateState]] = {}  # user -> (last event, state)
        latest: dict[int, UserAggregate] = {}
        for event in events:
            rec = await ctx.admitted(event, EmbeddingBatch)
            if rec is None:
                continue
            async with ctx.processing(event):
                _, state = states.get(rec.user_id) or (
                    None,
                    AGGREGATES.load(table.get(rec.user_id)),
                )
                stale = aggregator.stale_dropped
                agg = aggregator.add(state, rec.pairs())
                if aggregator.stale_dropped != stale:
                    metrics.STALE_EMBEDDINGS.inc(aggregator.stale_dropped - stale)
                states[rec.user_id] = (event, state)
                if agg is not None:
                    latest[rec.user_id] = agg
        if latest:
            aggs = list(latest.values())
            before = int(getattr(parts.store, "stale_skipped", 0))
            await write_with_retry(
                "write_aggregates",
                lambda: parts.store.write_aggregates(aggs, settings.aggregate_store_ttl_ms),
            )
            metrics.AGGREGATES.inc(len(aggs))
            metrics.count_stale_skipped(parts.store, before, "aggregate")
            for agg in aggs:
                parts.aggregate_times[agg.user_id] = agg.event_time_ms
        for user, (event, state) in states.items():
            with as_current(event):
                table[user] = AGGREGATES.dump(state)

    @ctx.app.agent(ctx.topics["embeddings"], concurrency=1, name="aggregate")
    async def on_embeddings(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await ctx.finish("aggregate", aggregate_batch, events)
