"""speculated → verify (one VM call per batch round) → ``verified``; the ledger is saved only
after the batch's deliveries are durable (a crash before re-verifies instead of skipping)."""

from __future__ import annotations

from typing import Any

import faust

from schemas.records import ProposalBatch
from streams.engine.history import Entry
from streams.engine.steps.verify import LedgerState, VerifyResult, verify_requests
from streams.live import metrics
from streams.live.agents.context import INFRA_ERRORS, AgentContext, as_current
from streams.live.offload import MODEL_POOL, in_pool
from streams.live.state import history_from_table, ledger_from_table, ledger_to_table

Decoded = list[tuple[Any, ProposalBatch]]  #: (Faust event, its record), in stream order
UserState = dict[int, tuple[LedgerState, list[Entry]]]


class VerifyAgent:
    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.ledger, self.history = ctx.tables["ledger"], ctx.tables["history"]

    async def on_batch(self, events: list[Any]) -> None:
        decoded, state = await self._load(events)
        if not decoded:
            return
        try:
            results = await in_pool(MODEL_POOL, self._verify, [b for _, b in decoded], state)
        except INFRA_ERRORS:
            raise
        except Exception:  # isolate the bad message: verify one by one
            decoded, results = await self._one_by_one(decoded, state)
        await self._send_then_save(decoded, results)

    async def _load(self, events: list[Any]) -> tuple[Decoded, UserState]:
        decoded: Decoded = []
        state: UserState = {}
        for event in events:
            b = await self.ctx.admitted(event, ProposalBatch)
            if b is None:
                continue
            async with self.ctx.processing(event):  # state read in the event's partition
                if b.user_id not in state:
                    led = ledger_from_table(self.ledger.get(b.user_id))
                    state[b.user_id] = (led, history_from_table(self.history.get(b.user_id)))
                decoded.append((event, b))
        return decoded, state

    def _verify(self, batches: list[ProposalBatch], state: UserState) -> list[VerifyResult]:
        parts = self.ctx.parts
        return verify_requests(
            batches,
            lambda u: state[u][0],
            lambda u: state[u][1],
            parts.stages.verifier,
            parts.knobs,
        )

    async def _one_by_one(
        self, decoded: Decoded, state: UserState
    ) -> tuple[Decoded, list[VerifyResult]]:
        kept: Decoded = []
        results: list[VerifyResult] = []
        for event, b in decoded:
            try:
                (res,) = await in_pool(MODEL_POOL, self._verify, [b], state)
            except INFRA_ERRORS:
                raise
            except Exception as exc:
                await self.ctx.dead_for(event, exc)
                continue
            if res.ledger is not None:  # the user's next request sees this one's pairs
                state[b.user_id] = (res.ledger, state[b.user_id][1])
            kept.append((event, b))
            results.append(res)
        return kept, results

    async def _send_then_save(self, decoded: Decoded, results: list[VerifyResult]) -> None:
        deliveries = []
        for (_, b), res in zip(decoded, results, strict=True):
            self._count(res)
            if res.out is not None:
                deliveries.append(
                    await self.ctx.send("verified", b.user_id, res.out, b.event_time_ms)
                )
        for delivery in deliveries:
            await delivery
        last: dict[int, tuple[Any, LedgerState]] = {}  # a user's later results carry the earlier
        for (event, b), res in zip(decoded, results, strict=True):
            if res.ledger is not None:
                last[b.user_id] = (event, res.ledger)
        for user, (event, ledger) in last.items():  # one table write per user and batch
            with as_current(event):
                self.ledger[user] = ledger_to_table(ledger)

    def _count(self, res: VerifyResult) -> None:
        if res.redelivered:
            self.ctx.parts.count(redelivered=1)
            return
        dropped = res.proposed - res.verified
        metrics.VERIFIER_DROPPED.inc(dropped)
        metrics.VERIFIED.inc(res.verified)
        self.ctx.parts.count(verified=res.verified, dropped=dropped)


def register(ctx: AgentContext) -> None:
    agent = VerifyAgent(ctx)

    @ctx.app.agent(ctx.topics["speculated"], concurrency=1, name="verify")
    async def on_speculated(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await agent.on_batch(events)
