"""requests → speculate (proposals to ``speculated``), user representations, neighbour refresh.

The neighbour refresh runs here because it is driven by the event-time clock of requests: at
each request it runs first if due, exactly where the simulator runs it.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

import faust

from schemas.records import ProposalBatch, RequestEvent
from streams.engine.stages import undone_on_error
from streams.engine.state import RECENT, REPS, aggregate_confirmed
from streams.engine.steps.speculate import StoredUserState, request_step
from streams.live import metrics
from streams.live.agents.context import AgentContext
from streams.live.agents.verify import UserTables, VerifyAgent
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
        self.recent = BatchState(t["recent"], RECENT.load, RECENT.dump)
        self.proposals: collections.Counter[str] = collections.Counter()  #: per strategy

    def tables(self) -> UserTables:
        """The batch's state as the fused verify step reads it (each user read once)."""
        return UserTables(self.ledger.get, self.history.get, self.confirmed.get)

    def save(self, proposals: Any) -> None:
        """Write the representations and pair memories; count the proposals (one increment
        per strategy)."""
        self.reps.save()
        self.recent.save()
        for strategy, n in self.proposals.items():
            proposals(strategy).inc(n)


class SpeculateAgent:
    """requests → speculate; with ``verifier`` (``SOLARIS_FUSE_VERIFY``) it also verifies each
    batch's proposals itself and sends ``verified`` instead of ``speculated``."""

    def __init__(
        self,
        ctx: AgentContext,
        refresher: NeighbourRefresher | None,
        verifier: VerifyAgent | None = None,
    ) -> None:
        self.ctx, self.refresher, self.verifier = ctx, refresher, verifier
        self.proposals = metrics.bound(metrics.PROPOSALS)
        self.horizon_ms = ctx.parts.config.reader.neighbour_aggregate_ttl_ms

    async def on_request(
        self, rec: RequestEvent, state: RequestsBatch, event: Any
    ) -> ProposalBatch | None:
        """One request's step; returns its proposals (or None)."""
        parts, ctx = self.ctx.parts, self.ctx
        parts.now_ms = max(parts.now_ms, rec.event_time_ms)
        partition = event.message.partition
        parts.table_clocks.saw("reps", partition, rec.event_time_ms)
        parts.table_clocks.saw("recent", partition, rec.event_time_ms)
        if self.verifier is not None:  # this agent writes the ledger too
            parts.table_clocks.saw("ledger", partition, rec.event_time_ms)
        if self.refresher is not None:
            await self.refresher.maybe_refresh(
                rec.event_time_ms, ctx.tables["aggregates"], ctx.tables["reps"]
            )
        user = rec.user_id
        out = request_step(  # state read in this event's partition
            rec,
            state.ledger.get(user).pairs,
            functools.partial(state.confirmed.get, user),
            state.history.get(user),
            StoredUserState(
                functools.partial(state.reps.get, user), functools.partial(state.recent.get, user)
            ),
            parts.stages,
            self.horizon_ms,
        )
        metrics.count_foreign_resets(out.foreign_resets, "representation")
        if out.rep is not None:
            state.reps.put(user, out.rep, event)
        if out.memory is not None:
            state.recent.put(user, out.memory, event)
        if out.proposals is not None:
            state.proposals.update(out.proposals.strategies)
        return out.proposals

    async def on_batch(self, events: list[Any]) -> None:
        """Speculate every request; state is saved only once the proposals are delivered, and
        the in-process state (item prior, representations) is undone on an error, so a batch run
        again after a failed delivery starts from the same state."""
        ctx = self.ctx
        speculated: list[tuple[Any, ProposalBatch]] = []
        state = RequestsBatch(ctx)
        with undone_on_error(ctx.parts.stages):
            for event in events:
                rec = await ctx.admitted(event, RequestEvent)
                if rec is None:
                    continue
                async with ctx.processing(event):
                    batch = await self.on_request(rec, state, event)
                    if batch is not None:
                        speculated.append((event, batch))
            if self.verifier is not None:
                await self.verifier.verify_speculated(speculated, state.tables())
            else:
                await self.send_all(speculated)
            state.save(self.proposals)

    async def send_all(self, speculated: list[tuple[Any, ProposalBatch]]) -> None:
        """Send every proposal batch, then await the deliveries (once per batch, before Faust
        acks the batch)."""
        send = self.ctx.send
        pending = [await send("speculated", b.user_id, b, b.event_time_ms) for _, b in speculated]
        for delivery in pending:
            await delivery


def register(
    ctx: AgentContext, refresher: NeighbourRefresher | None, verifier: VerifyAgent | None = None
) -> None:
    """The speculate agent on ``requests`` (see :class:`SpeculateAgent`)."""
    agent = SpeculateAgent(ctx, refresher, verifier)

    @ctx.app.agent(ctx.topics["requests"], concurrency=1, name="speculate")
    async def on_requests(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await ctx.finish("speculate", agent.on_batch, events)
