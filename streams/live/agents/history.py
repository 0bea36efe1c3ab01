"""impressions → history table (the FM's input) and look-ahead counts."""

from __future__ import annotations

import faust

from schemas.records import ImpressionEvent
from streams.engine.steps.history import observe_impression
from streams.live.agents.context import AgentContext
from streams.live.state import history_from_table, history_to_table


def register(ctx: AgentContext) -> None:
    history = ctx.tables["history"]
    capacity = 2 * ctx.settings.history_len
    lookahead = ctx.parts.stages.lookahead

    @ctx.app.agent(ctx.topics["impressions"], concurrency=1, name="history")
    async def on_impressions(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            for event in events:
                rec = await ctx.admitted(event, ImpressionEvent)
                if rec is None:
                    continue
                async with ctx.processing(event):
                    entries = history_from_table(history.get(rec.user_id))
                    observe_impression(entries, rec, capacity, lookahead)
                    history[rec.user_id] = history_to_table(entries)
