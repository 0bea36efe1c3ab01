"""verified → FM in micro-batches capped in pairs → store pairs → ``embeddings``.

Needs no tables (verified messages carry the user's history), so it can run in its own consumer
group on GPU hosts. One store pipeline and one delivery wait per micro-batch.
"""

from __future__ import annotations

import time
from typing import Any

import faust

from schemas.records import PairProposal, ProposalBatch
from streams.engine.history import UserHistory
from streams.engine.steps.embed import (
    EmbedInput,
    EmbedOutcome,
    chunk_by_pairs,
    embed_input,
    embed_isolating,
    embedding_batch,
)
from streams.live import metrics
from streams.live.agents.context import INFRA_ERRORS, AgentContext
from streams.live.offload import MODEL_POOL, in_pool
from streams.live.retry import write_with_retry


def register(ctx: AgentContext) -> None:
    settings, parts = ctx.settings, ctx.parts

    async def fm(pairs: list[PairProposal], histories: list[UserHistory]) -> list[Any]:
        return await in_pool(MODEL_POOL, parts.stages.embedder.embed, pairs, histories)

    async def embed_all(items: list[EmbedInput[Any]]) -> EmbedOutcome[Any]:
        outcome = EmbedOutcome[Any]([], [])
        for group in chunk_by_pairs(items, settings.embed_batch_pairs):
            start = time.perf_counter()
            part = await embed_isolating(group, fm, INFRA_ERRORS)
            metrics.FM_LATENCY.observe(time.perf_counter() - start)
            metrics.FM_BATCH_SIZE.observe(sum(len(it.pairs) for it in group))
            outcome.done += part.done
            outcome.failed += part.failed
            outcome.fm_calls += part.fm_calls
        return outcome

    async def store_and_send(outcome: EmbedOutcome[Any]) -> None:
        for item, exc in outcome.failed:
            await ctx.dead_for(item.event, exc)
        embeddings = [e for _, mine in outcome.done for e in mine]
        if not embeddings:
            return
        await write_with_retry(
            "write_pairs", lambda: parts.store.write_pairs(embeddings, settings.pair_ttl_ms)
        )
        metrics.EMBEDDED.inc(len(embeddings))
        parts.count(embedded=len(embeddings), fm_batches=outcome.fm_calls)
        deliveries = [
            await ctx.send(
                "embeddings",
                it.batch.user_id,
                embedding_batch(it.batch, mine),
                it.batch.event_time_ms,
            )
            for it, mine in outcome.done
        ]
        for delivery in deliveries:
            await delivery

    @ctx.app.agent(ctx.topics["verified"], concurrency=1, name="embed")
    async def on_verified(stream: faust.StreamT) -> None:
        wait_s = settings.embed_max_wait_ms / 1000
        async for events in stream.take_events(settings.embed_batch_size, within=wait_s):  # type: ignore[attr-defined]
            items: list[EmbedInput[Any]] = []
            for event in events:
                rec = await ctx.admitted(event, ProposalBatch)
                if rec is None:
                    continue
                async with ctx.processing(event):  # invalid input: that message only
                    items.append(embed_input(event, rec))
            await store_and_send(await embed_all(items))
