"""The Faust app: one agent per engine step, per-user state in RocksDB tables with changelogs.

Topology (all topics keyed by user id, so one user's events and state share a partition)::

    impressions ─► [history]                       (table history: last 2L interactions)
    requests    ─► [speculate] ─► speculated       (reads table ledger; table reps)
    speculated  ─► [verify: VM] ─► verified        (updates ledger; attaches history)
    verified    ─► [embed: FM, micro-batches] ─► store pairs ─► embeddings
    embeddings  ─► [aggregate] ─► store aggregates (table aggregates: 24 h buckets)
    requests    ─► [neighbours, every interval of event time, before speculating]
                   ─► store neighbour lists + KNN snapshot (cold-start index of the ranker)
    any bad message ─► dead-letter

Every agent runs with concurrency 1 (faust-streaming #606) and commits offsets only after its
store writes returned (at-least-once; writes are idempotent by key). Store writes retry with
backoff while the store is down, so the agent (and its offsets) wait instead of losing data.
The ``embed`` role can run in its own app (consumer group) on GPU hosts: it needs no tables,
since verified messages carry the user's history.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

import aiokafka.errors
import faust
import numpy as np

from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    PairProposal,
    ProposalBatch,
    RequestEvent,
)
from streams.engine.aggregator import AggregateState
from streams.engine.history import UserHistory, add_interaction, history_before
from streams.engine.ledger import is_fresh, record
from streams.kafka_security import faust_credentials
from streams.live import metrics
from streams.live.components import Components
from streams.live.dead_letters import Origin, dead_letter_for, decode
from streams.live.embed_batches import (
    EmbedInput,
    EmbedOutcome,
    chunk_by_pairs,
    embed_input,
    embed_isolating,
)
from streams.live.health import readiness
from streams.live.neighbours_job import NeighbourRefresher, snapshot_name
from streams.live.offload import MODEL_POOL, STORE_POOL, in_pool
from streams.live.retry import write_with_retry
from streams.live.state import (
    history_from_table,
    history_to_table,
    ledger_from_table,
    ledger_to_table,
    verified_requests_from_table,
)
from streams.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
PROCESSING_ERROR = "processing_error"
#: infrastructure failures: not the message's fault, so never a dead letter (Faust restarts)
INFRA_ERRORS: tuple[type[BaseException], ...] = (aiokafka.errors.KafkaError,)
ROLES = ("history", "speculate", "verify", "embed", "aggregate", "neighbours")
#: ``neighbours`` runs inside the requests agent (it needs the event-time clock of requests).
STATEFUL = frozenset(ROLES) - {"embed"}


def app_id(settings: Settings, roles: Iterable[str]) -> str:
    """Consumer group / app id: the stateful pipeline and a stand-alone FM group differ."""
    return (
        f"{settings.topic_prefix}-fm"
        if set(roles) == {"embed"}
        else f"{settings.topic_prefix}-pipeline"
    )


def create_app(
    settings: Settings, roles: Iterable[str], parts: Components, web_port: int | None = None
) -> faust.App:
    """Build the Faust app with the agents of ``roles`` (see :data:`ROLES`)."""
    roles = frozenset(roles)
    unknown = roles - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles {sorted(unknown)}; known: {ROLES}")
    if "embed" not in roles and roles & STATEFUL != roles:
        raise ValueError("bad role set")
    aid = app_id(settings, roles)
    datadir = settings.cache_dir / "run" / "faust" / aid
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        aid,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=faust_credentials(settings),
        store="rocksdb://",
        datadir=str(datadir),
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication,
        web_enabled=web_port is not None,
        web_port=web_port or 6066,
        web_bind=settings.bind_host,
        consumer_auto_offset_reset="earliest",
        key_serializer="json",  # tables: int user ids -> JSON values; topics override with raw
        value_serializer="json",
        broker_commit_every=100,
        broker_commit_interval=settings.faust_commit_interval_s,
        table_standby_replicas=0,
        producer_acks=-1,
    )
    codec, P = parts.codec, settings.topic_partitions
    topics = {
        name: app.topic(
            settings.topic(name),
            key_type=bytes,
            value_type=bytes,
            partitions=P,
            key_serializer="raw",
            value_serializer="raw",
        )
        for name in (
            "requests",
            "impressions",
            "speculated",
            "verified",
            "embeddings",
            "dead-letter",
        )
    }
    L = settings.history_len
    tables: dict[str, Any] = {}
    if roles & STATEFUL:
        for name in ("history", "ledger", "aggregates", "reps"):
            tables[name] = app.Table(name, default=None, partitions=P)

    async def dead(dl: DeadLetter) -> None:
        await topics["dead-letter"].send(key=dl.raw_key, value=codec.encode(dl))
        parts.count(**{f"dead_letters_{dl.reason}": 1})

    async def decoded(event: Any, expect: type[T]) -> T | None:
        """The event's record, or None after sending it to the dead-letter topic."""
        rec = decode(codec, event.value, expect, origin(event), event.key)
        if isinstance(rec, DeadLetter):
            await dead(rec)
            return None
        return rec

    async def dead_for(event: Any, exc: Exception) -> None:
        """Dead-letter ``event`` for an error raised while processing it."""
        log.warning("processing failed", extra={"error": repr(exc)[:500]})
        error = f"{type(exc).__name__}: {exc}"
        await dead(dead_letter_for(origin(event), event.key, event.value, PROCESSING_ERROR, error))

    @contextlib.asynccontextmanager
    async def processing(event: Any) -> AsyncIterator[None]:
        """Any error while processing ``event`` dead-letters it (``processing_error``, with the
        error text) and the agent moves on to the next message; Kafka errors propagate."""
        try:
            yield
        except INFRA_ERRORS:
            raise
        except Exception as exc:
            await dead_for(event, exc)

    def origin(event: Any) -> Origin:
        m = event.message
        return Origin(m.topic, m.partition, m.offset)

    def user_key(user_id: int) -> bytes:
        return str(user_id).encode()

    if "history" in roles:
        history = tables["history"]

        @app.agent(topics["impressions"], concurrency=1)
        async def on_impressions(stream: faust.StreamT) -> None:
            async for event in stream.events():
                rec = await decoded(event, ImpressionEvent)
                if rec is None:
                    continue
                async with processing(event):
                    entries = history_from_table(history.get(rec.user_id))
                    if parts.lookahead is not None:
                        recent = [(i, t) for i, lab, t in entries if lab][-5:]
                        parts.lookahead.observe(recent, rec.item_id, rec.label, rec.event_time_ms)
                    add_interaction(entries, rec.item_id, rec.label, rec.event_time_ms, 2 * L)
                    history[rec.user_id] = history_to_table(entries)

    if "speculate" in roles:
        ledger, history, reps = tables["ledger"], tables["history"], tables["reps"]
        refresher = (
            NeighbourRefresher(settings, parts, snapshot_name(aid))
            if "neighbours" in roles and parts.reps is not None
            else None
        )

        @app.agent(topics["requests"], concurrency=1)
        async def on_requests(stream: faust.StreamT) -> None:
            async for event in stream.events():
                rec = await decoded(event, RequestEvent)
                if rec is None:
                    continue
                async with processing(event):
                    parts.now_ms = max(parts.now_ms, rec.event_time_ms)
                    if refresher is not None:
                        await refresher.maybe_refresh(rec.event_time_ms, tables["aggregates"], reps)
                    recent = [
                        i for i, lab, _ in history_from_table(history.get(rec.user_id)) if lab
                    ][-5:]
                    proposals = parts.speculator.propose(
                        rec, ledger_from_table(ledger.get(rec.user_id)), recent
                    )
                    if parts.prior is not None:
                        parts.prior.observe(rec.candidates, rec.event_time_ms, rec.user_id)
                    if parts.reps is not None:
                        saved = reps.get(rec.user_id)
                        if saved and not parts.reps.has(rec.user_id):  # after a restart
                            parts.reps.set(
                                rec.user_id, np.asarray(saved[0], np.float32), int(saved[1])
                            )
                        if not saved or rec.event_time_ms > int(
                            saved[1]
                        ):  # a redelivery changes nothing
                            parts.reps.observe(rec.user_id, rec.candidates, rec.event_time_ms)
                            reps[rec.user_id] = [
                                parts.reps.vector(rec.user_id).tolist(),
                                rec.event_time_ms,
                            ]
                    for p in proposals:
                        metrics.PROPOSALS.labels(p.strategy).inc()
                    if proposals:
                        batch = ProposalBatch(
                            rec.request_id,
                            rec.user_id,
                            rec.event_time_ms,
                            len(rec.candidates),
                            tuple(p.item_id for p in proposals),
                            tuple(p.strategy for p in proposals),
                        )
                        await topics["speculated"].send(
                            key=user_key(rec.user_id),
                            value=codec.encode(batch),
                            timestamp=rec.event_time_ms / 1000,
                        )

    if "verify" in roles:
        ledger, history = tables["ledger"], tables["history"]
        refresh_after = parts.config.speculator.refresh_after_ms

        @app.agent(topics["speculated"], concurrency=1)
        async def on_speculated(stream: faust.StreamT) -> None:
            # One request per iteration: Faust lets a table change only inside the iteration of
            # the event it belongs to. A VM call per request (tens of pairs) is cheap.
            async for event in stream.events():
                b = await decoded(event, ProposalBatch)
                if b is None:
                    continue
                async with processing(event):
                    saved = ledger.get(b.user_id)
                    done = verified_requests_from_table(saved)
                    if b.request_id in done:
                        # A redelivery (e.g. after a crash) of a request whose pairs are already in
                        # `verified`: verifying it again would see its own pairs as fresh and pick the
                        # next best ones, i.e. extra FM work an uninterrupted run never does.
                        parts.count(redelivered=1)
                        log.info(
                            "skipped a redelivered request: its pairs are already verified",
                            extra={"request_id": b.request_id, "user_id": b.user_id},
                        )
                        continue
                    # Re-check freshness: a request speculated before the previous one's ledger
                    # update landed must not embed the same pairs twice.
                    led = ledger_from_table(saved)
                    group = [
                        PairProposal(b.request_id, b.user_id, i, b.event_time_ms, s)
                        for i, s in zip(b.item_ids, b.strategies, strict=True)
                        if not is_fresh(led, i, b.event_time_ms, refresh_after)
                    ]
                    ok = group
                    if parts.verifier is not None and group:
                        verified = await in_pool(
                            MODEL_POOL, parts.verifier.verify_many, [group], [b.candidates]
                        )
                        ok = verified[0]
                    metrics.VERIFIER_DROPPED.inc(len(group) - len(ok))
                    parts.count(verified=len(ok), dropped=len(group) - len(ok))
                    if not ok:  # nothing sent, nothing to remember
                        continue
                    metrics.VERIFIED.inc(len(ok))
                    hist = history_before(
                        history_from_table(history.get(b.user_id)), b.event_time_ms, L
                    )
                    out = ProposalBatch(
                        b.request_id,
                        b.user_id,
                        b.event_time_ms,
                        b.candidates,
                        tuple(p.item_id for p in ok),
                        tuple(p.strategy for p in ok),
                        tuple(float(p.score or 0.0) for p in ok),
                        tuple(hist.items.tolist()),
                        tuple(hist.labels.tolist()),
                        tuple(hist.times_ms.tolist()),
                    )
                    delivery = await topics["verified"].send(
                        key=user_key(b.user_id),
                        value=codec.encode(out),
                        timestamp=b.event_time_ms / 1000,
                    )
                    # The ledger says "embedded" only once the verified message is durably in Kafka:
                    # a crash before this point re-verifies the pairs instead of skipping them.
                    await delivery
                    record(led, (p.item_id for p in ok), b.event_time_ms, settings.pair_ttl_ms)
                    ledger[b.user_id] = ledger_to_table(led, [*done, b.request_id])

    if "embed" in roles:

        @app.agent(topics["verified"], concurrency=1)
        async def on_verified(stream: faust.StreamT) -> None:
            async for events in stream.take_events(  # type: ignore[attr-defined]
                settings.embed_batch_size, within=settings.embed_max_wait_ms / 1000
            ):
                items: list[EmbedInput[Any]] = []
                for event in events:
                    rec = await decoded(event, ProposalBatch)
                    if rec is None:
                        continue
                    async with processing(event):  # invalid input: that message only
                        items.append(embed_input(event, rec))
                await _embed(items)

        async def _fm(pairs: list[PairProposal], histories: list[UserHistory]) -> list[Any]:
            return await in_pool(MODEL_POOL, parts.embedder.embed, pairs, histories)

        async def _embed(items: list[EmbedInput[Any]]) -> None:
            outcome = EmbedOutcome[Any]([], [])
            for group in chunk_by_pairs(items, settings.embed_batch_pairs):
                start = time.perf_counter()
                part = await embed_isolating(group, _fm, INFRA_ERRORS)
                metrics.FM_LATENCY.observe(time.perf_counter() - start)
                metrics.FM_BATCH_SIZE.observe(sum(len(it.pairs) for it in group))
                outcome.done += part.done
                outcome.failed += part.failed
                outcome.fm_calls += part.fm_calls
            for item, exc in outcome.failed:
                await dead_for(item.event, exc)
            embeddings = [e for _, mine in outcome.done for e in mine]
            if not embeddings:
                return
            await write_with_retry(
                "write_pairs", lambda: parts.store.write_pairs(embeddings, settings.pair_ttl_ms)
            )
            metrics.EMBEDDED.inc(len(embeddings))
            parts.count(embedded=len(embeddings), fm_batches=outcome.fm_calls)
            for item, mine in outcome.done:
                b, first = item.batch, mine[0]
                out = EmbeddingBatch(
                    b.request_id,
                    b.user_id,
                    b.event_time_ms,
                    first.model_version,
                    first.dtype,
                    first.dim,
                    tuple(e.item_id for e in mine),
                    b"".join(e.vector for e in mine),
                )
                await topics["embeddings"].send(
                    key=user_key(b.user_id),
                    value=codec.encode(out),
                    timestamp=b.event_time_ms / 1000,
                )

    if "aggregate" in roles:
        aggregates = tables["aggregates"]

        @app.agent(topics["embeddings"], concurrency=1)
        async def on_embeddings(stream: faust.StreamT) -> None:
            async for event in stream.events():
                rec = await decoded(event, EmbeddingBatch)
                if rec is None:
                    continue
                async with processing(event):
                    state = AggregateState.from_json(aggregates.get(rec.user_id))
                    stale = parts.aggregator.stale_dropped
                    agg = parts.aggregator.add(state, rec.pairs())
                    if parts.aggregator.stale_dropped > stale:
                        metrics.STALE_EMBEDDINGS.inc(parts.aggregator.stale_dropped - stale)
                    if agg is not None:
                        # Store first, then state: a crash in between re-adds the same pairs and
                        # writes the same aggregate again (idempotent).
                        write = functools.partial(
                            parts.store.write_aggregates, [agg], settings.aggregate_store_ttl_ms
                        )
                        await write_with_retry("write_aggregates", write)
                        metrics.AGGREGATES.inc()
                        parts.aggregate_times[rec.user_id] = agg.event_time_ms
                        aggregates[rec.user_id] = state.to_json()

    if web_port is not None:

        @app.page("/readyz")
        async def readyz(web: Any, request: Any) -> Any:
            """Ready: partitions assigned, no rebalance or table recovery, store reachable."""
            checks = {
                "partitions_assigned": bool(app.consumer.assignment()),
                "not_rebalancing": not app.rebalancing,
                "tables_recovered": not (roles & STATEFUL) or not app.tables.recovery.in_recovery,  # type: ignore[attr-defined]
                "store_reachable": await in_pool(STORE_POOL, parts.store.ping),
            }
            status, body = readiness(checks)
            return web.json(body, status=status)

        @app.page("/healthz")
        async def healthz(web: Any, request: Any) -> Any:
            return web.json({"live": True})

    @app.timer(interval=1.0)
    async def flush_counters() -> None:
        """Counters are batched per second and flushed off the event loop."""
        pending = parts.take_counts()
        if pending:
            await in_pool(STORE_POOL, parts.publish_counts, pending)

    return app
