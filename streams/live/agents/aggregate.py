"""embeddings → rolling 24 h user aggregates (table ``aggregates``) → store.

Per batch: the aggregate step (:mod:`streams.engine.steps.aggregate`, the simulator's too)
folds every message into its user's state in batch order, the batch's aggregates go to the
store in one write, and only then is state saved — a crash in between re-adds the same pairs
and writes the same aggregates again (idempotent).

A message the step refuses (for one, an embedding of this worker's FM version whose dim is not
that FM's: :func:`~streams.engine.aggregator.check_model_dim`) is dead-lettered alone
(``processing_error``). Messages of another model version are accepted; they restart the user's
buckets (see :mod:`streams.engine.aggregator`).
"""

from __future__ import annotations

from typing import Any

import faust

from schemas.records import EmbeddingBatch
from streams.engine.state import AGGREGATES
from streams.engine.steps.aggregate import aggregate_step
from streams.live import metrics
from streams.live.agents.context import INFRA_ERRORS, AgentContext, as_current
from streams.live.retry import write_with_retry
from streams.live.state import read_table


def register(ctx: AgentContext) -> None:
    table, parts, settings = ctx.tables["aggregates"], ctx.parts, ctx.settings
    aggregator = parts.stages.aggregator
    clocks = parts.table_clocks

    async def aggregate_batch(events: list[Any]) -> None:
        admitted: list[tuple[Any, EmbeddingBatch]] = []
        for event in events:
            rec = await ctx.admitted(event, EmbeddingBatch)
            if rec is not None:
                admitted.append((event, rec))
                clocks.saw("aggregates", event.message.partition, rec.event_time_ms)
        sealed, dropped = aggregator.sealed_dropped, aggregator.keys_dropped
        result = aggregate_step(
            [rec for _, rec in admitted],
            lambda user: AGGREGATES.load(read_table(table, user)),
            aggregator,
            isolate=(Exception,),  # any error of one message's fold costs only that message
        )
        for _, exc in result.refused:  # the machine's error, not the message's: rerun the batch
            if isinstance(exc, INFRA_ERRORS):
                raise exc
        for index, exc in result.refused:
            await ctx.dead_for(admitted[index][0], exc)
        if result.stale_dropped:
            metrics.STALE_EMBEDDINGS.inc(result.stale_dropped)
        metrics.SEALED_EMBEDDINGS.inc(aggregator.sealed_dropped - sealed)
        metrics.AGGREGATE_KEYS_DROPPED.inc(aggregator.keys_dropped - dropped)
        if result.aggregates:
            aggs = list(result.aggregates.values())
            before = int(getattr(parts.store, "stale_skipped", 0))
            await write_with_retry(
                "write_aggregates",
                lambda: parts.store.write_aggregates(aggs, settings.aggregate_store_ttl_ms),
            )
            metrics.AGGREGATES.inc(len(aggs))
            metrics.count_stale_skipped(parts.store, before, "aggregate")
            for agg in aggs:
                parts.aggregate_times[agg.user_id] = agg.event_time_ms
        last_event = {rec.user_id: event for event, rec in admitted}  # the changelog's origin
        for user, state in result.states.items():
            with as_current(last_event[user]):
                table[user] = AGGREGATES.dump(state)

    @ctx.app.agent(ctx.topics["embeddings"], concurrency=1, name="aggregate")
    async def on_embeddings(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await ctx.finish("aggregate", aggregate_batch, events)
