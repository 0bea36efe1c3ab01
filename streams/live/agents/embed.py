"""verified → FM in micro-batches capped in pairs → store pairs (and the users' FM states, for the
state tier) → ``embeddings``.

Needs no tables (verified messages carry the user's history), so it can run in its own consumer
group on GPU hosts.

A batch of messages is cut into FM groups (at most ``embed_batch_pairs`` pairs, and small enough
that a batch makes a few of them) and the groups are *pipelined*: group k+1 is in the model
thread while group k is written to the store (its own Redis pipeline, in the store pool) and
sent, and while the rest of the batch is still being decoded. Before, each stage waited for the
previous one, so the FM sat idle most of the time (live/bare 0.16 in ``bench fm``). Only the
model call itself runs in the model thread (it holds no GIL there); a group's inputs and records
are built on the event loop, so they overlap the model computing the neighbouring group.

Store writes stay in input order, one group after the other: a user's later request in the same
batch may embed the same pair again, and its newer value must be the one left in the store.
(Writes running side by side in the store pool, or a retried write, once left the older value:
the broker-restart and FM kill -9 fault tests caught "pairs stored with an older event time".)

At-least-once is unchanged: a message's pairs are stored before its ``embeddings`` message is
sent, sends go out in input order, and every delivery of the batch is awaited before the batch
is done (Faust acks its events only then).

A message is dead-lettered alone (``processing_error``) when its input is invalid, its FM call
fails while other messages' succeed (when the FM fails on every message of a group it is the
model's fault: ``ModelUnavailable``, retried like an infrastructure error), its FM output is
not finite (checked in :func:`embed_isolating`) or its ``embeddings``
message cannot be encoded: each group's messages are encoded *before* the group is stored, so
nothing of a refused message reaches the store and the rest of the batch is stored and sent.
An infrastructure error (``INFRA_ERRORS``) cancels the rest of the batch and propagates to the
agent's batch guard, which runs the whole batch again (``streams.live.batch_guard``).

Shedding (``SOLARIS_SHED_CLOCK=wall``, issue 24 item 6): a valid message dated more than the pair
TTL before the wall clock is dropped before the FM (:func:`past_pair_ttl`): a backlogged FM works
oldest-first, and such pairs could never be served exact. Counted
(``solaris_pairs_shed_total``) and logged with the batch's shed range, never dead-lettered (it is
not bad data). Off by default: the FM worker cannot tell a backlog of live traffic from a replay
of old traffic, whose every message is older than the TTL by the wall clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import faust
import numpy as np

from schemas.records import PairEmbedding, ProposalBatch
from streams.engine.steps.embed import (
    EmbedInput,
    EmbedOutcome,
    embed_input,
    embed_isolating,
    embedding_batch,
    past_pair_ttl,
)
from streams.engine.steps.state import computed_states, encode_states, state_rows
from streams.live import metrics
from streams.live.agents.context import INFRA_ERRORS, AgentContext, user_key
from streams.live.offload import MODEL_POOL, in_pool
from streams.live.retry import write_with_retry

log = logging.getLogger(__name__)

#: one message ready to store and send: its input, its pairs' embeddings, its encoded message
Encoded = tuple[EmbedInput[Any], list[PairEmbedding], bytes]
#: a batch is cut into about this many FM groups, so the FM overlaps storing and sending ...
OVERLAP_GROUPS = 4
#: ... but no group is cut smaller than this many pairs (per-call overhead)
MIN_GROUP_PAIRS = 128


def group_pairs(max_pairs: int, batch_messages: int, pairs_per_message: float) -> int:
    """Pairs per FM group: ``max_pairs`` at most, and about a quarter of an expected batch."""
    expected = batch_messages * max(pairs_per_message, 1.0)
    return max(1, min(max_pairs, max(MIN_GROUP_PAIRS, int(expected / OVERLAP_GROUPS) + 1)))


@dataclass
class Shed:
    """The verified messages one batch shed: how many, their pairs, their event-time range."""

    now_ms: int
    messages: int = 0
    pairs: int = 0
    oldest_ms: int = 0
    newest_ms: int = 0

    def add(self, b: ProposalBatch) -> None:
        t = b.event_time_ms
        self.oldest_ms = t if not self.messages else min(self.oldest_ms, t)
        self.newest_ms = t if not self.messages else max(self.newest_ms, t)
        self.messages += 1
        self.pairs += len(b.item_ids)


class EmbedAgent:
    """The ``embed`` adapter: decode, pipelined FM groups, store, send (see the module)."""

    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.parts = ctx.parts
        #: running mean of pairs per message, to size the groups of the next batch
        self.pairs_per_message = 8.0
        #: the state of each message the split FM embedded in the running batch, by the
        #: message's ``id`` (its EmbedInput lives until the batch ends, which clears this): the
        #: state tier stores these instead of running the history encoder again
        self.message_states: dict[int, np.ndarray] = {}

    async def fm(self, items: list[EmbedInput[Any]]) -> list[PairEmbedding]:
        """One FM call: inputs and records built here, only the model in the model thread
        (onnxruntime releases the GIL), so the next group's inputs are built while it runs."""
        embedder = self.parts.stages.embedder
        prepared = embedder.prepare_messages(
            [it.batch for it in items], [it.history for it in items]
        )
        if not len(prepared):
            return []
        vectors = await in_pool(MODEL_POOL, embedder.run, prepared)
        if prepared.states is not None:
            self.message_states.update(zip(map(id, items), prepared.states, strict=True))
        return embedder.records(prepared, vectors)

    async def embed_group(self, group: list[EmbedInput[Any]]) -> EmbedOutcome[Any]:
        """One FM group (queued in the model thread in batch order)."""
        start = time.perf_counter()
        outcome = await embed_isolating(group, self.fm, INFRA_ERRORS)
        metrics.FM_LATENCY.observe(time.perf_counter() - start)
        metrics.FM_BATCH_SIZE.observe(sum(it.n_pairs for it in group))
        return outcome

    async def encode(self, outcome: EmbedOutcome[Any]) -> list[Encoded]:
        """One group's ``embeddings`` messages, encoded before anything of the group is stored;
        the messages that failed (in the FM, or here: a data fault) are dead-lettered alone."""
        for item, exc in outcome.failed:
            await self.ctx.dead_for(item.event, exc)
        codec = self.parts.codec
        ready: list[Encoded] = []
        for it, mine in outcome.done:
            async with self.ctx.processing(it.event):  # InvalidField: that message only
                ready.append((it, mine, codec.encode(embedding_batch(it.batch, mine))))
        return ready

    async def store(self, ready: list[Encoded], fm_calls: int) -> None:
        """One group's store write; the caller awaits it before the next group's."""
        embeddings = [e for _, mine, _ in ready for e in mine]
        if embeddings:
            ttl = self.settings.pair_ttl_ms
            store = self.parts.store
            before = int(getattr(store, "stale_skipped", 0))
            await write_with_retry("write_pairs", lambda: store.write_pairs(embeddings, ttl))
            metrics.EMBEDDED.inc(len(embeddings))
            metrics.count_stale_skipped(store, before, "pair")
            await self.store_states([it for it, _, _ in ready])
        self.parts.count(embedded=len(embeddings), fm_batches=fm_calls)

    async def store_states(self, items: list[EmbedInput[Any]]) -> None:
        """The group's users' FM states for the state tier, after their pairs (the same step
        as the simulator's). A state model failure loses only these states (counted): the
        users keep their older state and every pair is already stored."""
        model = self.parts.models.state
        if model is None or not items:
            return
        dtype, version = self.parts.stages.embedder.dtype, self.parts.models.fm.model_version
        try:  # the FM run computed them (the split FM), or else the state model runs here
            known = np.stack([self.message_states[id(it)] for it in items])
        except KeyError:
            known = None
        if known is not None:
            states = computed_states(items, known, version, dtype)
        else:
            rows = state_rows(items)
            try:
                raw = await in_pool(MODEL_POOL, model.states, rows.times, rows.histories)
            except INFRA_ERRORS:
                raise
            except Exception as exc:
                metrics.STATE_ERRORS.labels("model").inc(len(rows.users))
                log.warning("user states not computed", extra={"error": str(exc)})
                return
            states = encode_states(rows, raw, version, dtype)
        if states.nonfinite:
            metrics.STATE_ERRORS.labels("nonfinite").inc(states.nonfinite)
        if states.values:
            store, ttl = self.parts.store, self.settings.state_ttl_ms
            before = int(getattr(store, "stale_skipped", 0))
            await write_with_retry("write_states", lambda: store.write_states(states.values, ttl))
            metrics.STATES_STORED.inc(len(states.values))
            metrics.count_stale_skipped(store, before, "state")

    async def send(self, ready: list[Encoded], deliveries: list[Awaitable[Any]]) -> None:
        """The group's ``embeddings`` messages, in input order (after its store write)."""
        sender = self.ctx.sender
        for it, _, data in ready:
            b = it.batch
            key = user_key(b.user_id)
            deliveries.append(await sender.send("embeddings", key, data, b.event_time_ms))

    def shed_clock(self) -> Shed | None:
        """A batch's shed tally at the shed clock's time now; None when shedding is off."""
        return Shed(int(time.time() * 1000)) if self.settings.shed_clock == "wall" else None

    def sheds(self, b: ProposalBatch, shed: Shed | None) -> bool:
        """Whether ``b`` is shed (and then tallied): dated more than the pair TTL before now."""
        ttl = self.settings.pair_ttl_ms
        if shed is None or not past_pair_ttl(b.event_time_ms, shed.now_ms, ttl):
            return False
        shed.add(b)
        return True

    def report_shed(self, shed: Shed | None) -> None:
        if shed is None or not shed.messages:
            return
        metrics.PAIRS_SHED.inc(shed.pairs)
        self.parts.count(shed=shed.pairs)
        log.warning(
            "shed %d verified messages (%d pairs) dated %d..%d: more than the pair TTL "
            "(%d ms) before the wall clock %d",
            shed.messages,
            shed.pairs,
            shed.oldest_ms,
            shed.newest_ms,
            self.settings.pair_ttl_ms,
            shed.now_ms,
            extra={"shed_messages": shed.messages, "shed_pairs": shed.pairs},
        )

    async def start_groups(
        self, events: list[Any], tasks: list[asyncio.Task[EmbedOutcome[Any]]]
    ) -> None:
        """Decode ``events`` and start each FM group as soon as its messages are decoded
        (appended to ``tasks``: the caller cancels them if decoding fails half-way); stale
        messages are shed (see the module)."""
        target = group_pairs(self.settings.embed_batch_pairs, len(events), self.pairs_per_message)
        group: list[EmbedInput[Any]] = []
        size = n_pairs = n_items = 0
        shed = self.shed_clock()
        for event in events:
            rec = await self.ctx.admitted(event, ProposalBatch)
            if rec is None:
                continue
            async with self.ctx.processing(event):  # invalid input: that message only
                item = embed_input(event, rec)
                if self.sheds(rec, shed):  # valid but stale: never dead-lettered
                    continue
                if group and size + item.n_pairs > self.settings.embed_batch_pairs:
                    tasks.append(asyncio.ensure_future(self.embed_group(group)))
                    group, size = [], 0
                group.append(item)
                size += item.n_pairs
                n_pairs, n_items = n_pairs + item.n_pairs, n_items + 1
                if size >= target:
                    tasks.append(asyncio.ensure_future(self.embed_group(group)))
                    group, size = [], 0
        if group:
            tasks.append(asyncio.ensure_future(self.embed_group(group)))
        if n_items:
            self.pairs_per_message = 0.8 * self.pairs_per_message + 0.2 * (n_pairs / n_items)
        self.report_shed(shed)

    async def handle(self, events: list[Any]) -> None:
        """One batch: FM groups pipelined; store writes and sends in input order, every
        delivery awaited at the end."""
        tasks: list[asyncio.Task[EmbedOutcome[Any]]] = []
        try:
            await self.start_groups(events, tasks)
            deliveries: list[Awaitable[Any]] = []
            for task in tasks:
                outcome = await task
                ready = await self.encode(outcome)
                await self.store(ready, outcome.fm_calls)
                await self.send(ready, deliveries)
            for delivery in deliveries:
                await delivery
        finally:
            await _cancel(tasks)
            self.message_states.clear()


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel what is still running (after a failure) and wait for it to stop."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def register(ctx: AgentContext) -> None:
    agent = EmbedAgent(ctx)
    settings = ctx.settings

    @ctx.app.agent(ctx.topics["verified"], concurrency=1, name="embed")
    async def on_verified(stream: faust.StreamT) -> None:
        batches = ctx.batches(stream, settings.embed_batch_size, settings.embed_max_wait_ms)
        async for events in batches:
            await ctx.finish("embed", agent.handle, events)
