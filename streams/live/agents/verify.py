"""speculated → verify (one VM call per batch round) → ``verified``; the ledger is saved only
after the batch's deliveries are durable (a crash before re-verifies instead of skipping)."""

from __future__ import annotations

from typing import Any

import faust

from schemas.records import ProposalBatch
from streams.engine.steps.verify import LedgerState, VerifyResult, verify_requests
from streams.live import metrics
from streams.live.agents.context import INFRA_ERRORS, AgentContext, as_current
from streams.live.offload import MODEL_POOL, in_pool
from streams.live.state import history_from_table, ledger_from_table, ledger_to_table


def register(ctx: AgentContext) -> None:
    ledger, history = ctx.tables["ledger"], ctx.tables["history"]
    parts = ctx.parts

    async def verify_batch(events: list[Any]) -> None:
        decoded: list[tuple[Any, ProposalBatch]] = []
        state: dict[int, tuple[LedgerState, list[Any]]] = {}
        for event in events:
            b = await ctx.decoded(event, ProposalBatch)
            if b is None:
                continue
            async with ctx.processing(event):  # state read in the event's partition
                if b.user_id not in state:
                    led = ledger_from_table(ledger.get(b.user_id))
                    state[b.user_id] = (led, history_from_table(history.get(b.user_id)))
                decoded.append((event, b))
        if not decoded:
            return
        try:
            results = await in_pool(MODEL_POOL, _verify, [b for _, b in decoded], state)
        except INFRA_ERRORS:
            raise
        except Exception:  # isolate the bad message: verify one by one
            decoded, results = await _one_by_one(decoded, state)
        await _send_then_save(decoded, results)

    def _verify(batches: list[ProposalBatch], state: dict[int, Any]) -> list[VerifyResult]:
        return verify_requests(
            batches,
            lambda u: state[u][0],
            lambda u: state[u][1],
            parts.stages.verifier,
            parts.knobs,
        )

    async def _one_by_one(
        decoded: list[tuple[Any, ProposalBatch]], state: dict[int, Any]
    ) -> tuple[list[tuple[Any, ProposalBatch]], list[VerifyResult]]:
        kept, results = [], []
        for event, b in decoded:
            try:
                (res,) = await in_pool(MODEL_POOL, _verify, [b], state)
            except INFRA_ERRORS:
                raise
            except Exception as exc:
                await ctx.dead_for(event, exc)
                continue
            if res.ledger is not None:  # the user's next request sees this one's pairs
                state[b.user_id] = (res.ledger, state[b.user_id][1])
            kept.append((event, b))
            results.append(res)
        return kept, results

    async def _send_then_save(
        decoded: list[tuple[Any, ProposalBatch]], results: list[VerifyResult]
    ) -> None:
        deliveries = []
        for (_, b), res in zip(decoded, results, strict=True):
            _count(res)
            if res.out is not None:
                deliveries.append(await ctx.send("verified", b.user_id, res.out, b.event_time_ms))
        for delivery in deliveries:
            await delivery
        for (event, b), res in zip(decoded, results, strict=True):
            if res.ledger is not None:
                with as_current(event):
                    ledger[b.user_id] = ledger_to_table(res.ledger)

    def _count(res: VerifyResult) -> None:
        if res.redelivered:
            parts.count(redelivered=1)
            return
        dropped = res.proposed - res.verified
        metrics.VERIFIER_DROPPED.inc(dropped)
        metrics.VERIFIED.inc(res.verified)
        parts.count(verified=res.verified, dropped=dropped)

    @ctx.app.agent(ctx.topics["speculated"], concurrency=1, name="verify")
    async def on_speculated(stream: faust.StreamT) -> None:
        async for events in ctx.batches(stream):
            await verify_batch(events)
