"""impressions → history table (the FM's input) and the look-ahead counts that follow it; with a fair
``vm_solaris`` (it reads streaming user features), each batch's changed histories also go to the
store, in one write before the table is saved (a crash in between rewrites the same values)."""

from __future__ import annotations

from typing import Any

import faust

from schemas.records import ImpressionEvent
from store.history_values import encode_history
from streams.engine.ranker import reads_history
from streams.engine.stages import rolled_back_on_error
from streams.engine.state import HISTORY
from streams.engine.steps.history import observe_impression
from streams.live.agents.context import AgentContext
from streams.live.derived_state import RebuiltOnAssignment
from streams.live.retry import write_with_retry
from streams.live.state import BatchState


def register(ctx: AgentContext) -> None:
    history = ctx.tables["history"]
    capacity = 2 * ctx.settings.history_len
    lookahead = ctx.parts.stages.lookahead
    store, ttl_ms = ctx.parts.store, ctx.settings.history_store_ttl_ms
    to_store = reads_history(ctx.parts.models.solaris)

    follow_assignment = (
        None
        if lookahead is None
        else RebuiltOnAssignment(
            ctx.app,
            history,
            "look-ahead counts",
            lambda values: lookahead.rebuild(HISTORY.load(v) for v in values),
        )
    )

    async def on_batch(events: list[Any]) -> None:
        """Every impression in event order; each user's history is written once per batch.
        The look-ahead counts (process memory) are undone if the batch fails: it runs again."""
        if follow_assignment is not None:
            follow_assignment()
        state = BatchState(history, HISTORY.load, HISTORY.dump)
        with rolled_back_on_error([lookahead] if lookahead is not None else []):
            for event in events:
                rec = await ctx.admitted(event, ImpressionEvent)
                if rec is None:
                    continue
                async with ctx.processing(event):
                    # a copy: an error dead-letters the event and leaves its user's state as
                    # it was (the look-ahead follows the history only once it has changed)
                    entries = list(state.get(rec.user_id))
                    observe_impression(entries, rec, capacity, lookahead)
                    state.put(rec.user_id, entries, event)
            if to_store and state.changed:
                values = {user: encode_history(state.values[user]) for user in state.changed}
                await write_with_retry(
                    "write_histories", lambda: store.write_histories(values, ttl_ms)
                )
            state.save()

    @ctx.app.agent(ctx.topics["impressions"], concurrency=1, name="history")
    async def on_impressions(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await ctx.finish("history", on_batch, events)
