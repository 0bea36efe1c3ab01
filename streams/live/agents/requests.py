"""requests → speculate (proposals to ``speculated``), user representations, neighbour refresh.

The neighbour refresh runs here because it is driven by the event-time clock of requests: at
each request it runs first if due, exactly where the simulator runs it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, TypeVar

import faust

from schemas.records import ProposalBatch, RequestEvent
from streams.engine.stages import undone_on_error
from streams.engine.state import RECENT, REPS, aggregate_confirmed
from streams.engine.steps.speculate import SpeculateInputs, speculate_step
from streams.live import metrics
from streams.live.agents.context import INFRA_ERRORS, AgentContext, as_current
from streams.live.agents.verify import UserTables, VerifyAgent
from streams.live.derived_state import RebuiltOnAssignment
from streams.live.neighbours_job import NeighbourRefresher
from streams.live.state import BatchState, history_from_table, ledger_from_table

V = TypeVar("V")


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

    def inputs(self, first: dict[int, Any]) -> SpeculateInputs:
        """The speculate step's loaders: each user's values read in the partition of
        ``first[user]`` (its first event in the run)."""

        def in_partition(load: Callable[[int], V]) -> Callable[[int], V]:
            def read(user: int) -> V:
                with as_current(first[user]):
                    return load(user)

            return read

        return SpeculateInputs(
            in_partition(lambda u: self.ledger.get(u).pairs),
            in_partition(self.confirmed.get),
            in_partition(self.history.get),
            in_partition(self.reps.get),
            in_partition(self.recent.get),
        )

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
        prior = ctx.parts.stages.prior
        #: the item prior counts the lists the ``recent`` table holds (None: no prior)
        self.follow_assignment = (
            None
            if prior is None
            else RebuiltOnAssignment(
                ctx.app,
                ctx.tables["recent"],
                "item prior",
                lambda values: prior.rebuild(RECENT.load(v) for v in values),
            )
        )

    async def admit(self, events: list[Any]) -> list[tuple[Any, RequestEvent]]:
        """The batch's requests (undecodable ones dead-lettered), with the event-time clocks
        of the tables this agent writes advanced."""
        parts, ctx = self.ctx.parts, self.ctx
        tables = ("reps", "recent", "ledger") if self.verifier is not None else ("reps", "recent")
        admitted: list[tuple[Any, RequestEvent]] = []
        for event in events:
            rec = await ctx.admitted(event, RequestEvent)
            if rec is None:
                continue
            parts.now_ms = max(parts.now_ms, rec.event_time_ms)
            for table in tables:
                parts.table_clocks.saw(table, event.message.partition, rec.event_time_ms)
            admitted.append((event, rec))
        return admitted

    async def speculate_run(
        self, run: list[tuple[Any, RequestEvent]], state: RequestsBatch
    ) -> list[tuple[Any, ProposalBatch]]:
        """One run of requests through the engine's step (each user's state read in the
        partition of its first event here, written in that of its last change)."""
        if not run:
            return []
        first = {rec.user_id: event for event, rec in reversed(run)}
        result = speculate_step(
            [rec for _, rec in run],
            state.inputs(first),
            self.ctx.parts.stages,
            self.horizon_ms,
            isolate=(Exception,),  # one poison request costs only itself
        )
        for index, exc in result.refused:
            if isinstance(exc, INFRA_ERRORS):
                raise exc  # the batch guard runs the batch again, whole (state undone)
            await self.ctx.dead_for(run[index][0], exc)
        metrics.count_foreign_resets(result.foreign_resets, "representation")
        for user, index in result.changed_at.items():
            event = run[index][0]
            if user in result.reps:
                state.reps.put(user, result.reps[user], event)
            if user in result.memories:
                state.recent.put(user, result.memories[user], event)
        state.proposals.update(result.strategies)
        return [(run[index][0], batch) for index, batch in result.proposals]

    async def on_batch(self, events: list[Any]) -> None:
        """Speculate every request; state is saved only once the proposals are delivered, and
        the in-process state (item prior, representations) is undone on an error, so a batch run
        again after a failed delivery starts from the same state. The batch is cut where a
        neighbour refresh falls due: the refresh runs before that request, as in the simulator."""
        ctx, refresher = self.ctx, self.refresher
        speculated: list[tuple[Any, ProposalBatch]] = []
        if self.follow_assignment is not None:
            self.follow_assignment()
        state = RequestsBatch(ctx)
        with undone_on_error(ctx.parts.stages):
            admitted = await self.admit(events)
            start = 0
            for index, (_, rec) in enumerate(admitted):
                if refresher is not None and refresher.due(rec.event_time_ms):
                    speculated += await self.speculate_run(admitted[start:index], state)
                    start = index
                    await refresher.maybe_refresh(
                        rec.event_time_ms, ctx.tables["aggregates"], ctx.tables["reps"]
                    )
            speculated += await self.speculate_run(admitted[start:], state)
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
