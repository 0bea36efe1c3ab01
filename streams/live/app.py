"""The Faust app: one agent per engine step, per-user state in RocksDB tables with changelogs.

Topology (all topics keyed by user id, so one user's events and state share a partition)::

    impressions ─► [history]                       (table history: last 2L interactions)
    requests    ─► [speculate] ─► speculated       (reads table ledger; tables reps, recent)
    speculated  ─► [verify: VM] ─► verified        (updates ledger; attaches history)
    verified    ─► [embed: FM, micro-batches] ─► store pairs ─► embeddings
    embeddings  ─► [aggregate] ─► store aggregates (table aggregates: 24 h buckets)
    requests    ─► [neighbours, every interval of event time, before speculating]
                   ─► store neighbour lists + KNN snapshot (cold-start index of the ranker)
    any bad message ─► dead-letter

With ``SOLARIS_FUSE_VERIFY`` the speculate agent verifies each batch itself
(``requests ─► [speculate + verify: VM] ─► verified``): ``speculated`` is not used.

Every agent runs with concurrency 1 (faust-streaming #606) and commits offsets only after its
store writes returned (at-least-once; writes are idempotent by key). Store writes retry with
backoff while the store is down, so the agent (and its offsets) wait instead of losing data.
The ``embed`` role can run in its own app (consumer group) on GPU hosts: it needs no tables,
since verified messages carry the user's history.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import faust

from streams.engine.state import CODECS
from streams.engine.steps.event_time import ClockRule, EventClock
from streams.kafka_security import faust_credentials
from streams.live import faust_commits, faust_fastpath, faust_fetch, table_expiry
from streams.live.agents import aggregate, embed, history, requests, verify, web
from streams.live.agents.context import AgentContext
from streams.live.changelog_sends import install_changelog_producer
from streams.live.components import Components
from streams.live.neighbours_job import NeighbourRefresher, snapshot_name
from streams.live.sends import sender_for
from streams.settings import Settings

log = logging.getLogger(__name__)
ROLES = ("history", "speculate", "verify", "embed", "aggregate", "neighbours")
#: ``neighbours`` runs inside the requests agent (it needs the event-time clock of requests).
STATEFUL = frozenset(ROLES) - {"embed"}
TOPICS = ("requests", "impressions", "speculated", "verified", "embeddings", "dead-letter")
TABLES = tuple(CODECS)  #: one Faust table per per-user state (streams.engine.state)


def app_id(settings: Settings, roles: Iterable[str]) -> str:
    """Consumer group / app id: the stateful pipeline and a stand-alone FM group differ."""
    return (
        f"{settings.topic_prefix}-fm"
        if set(roles) == {"embed"}
        else f"{settings.topic_prefix}-pipeline"
    )


def check_roles(roles: frozenset[str], fuse_verify: bool = False) -> None:
    unknown = roles - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles {sorted(unknown)}; known: {ROLES}")
    if fuse_verify and len(roles & {"speculate", "verify"}) == 1:
        raise ValueError(
            "SOLARIS_FUSE_VERIFY runs speculate and verify in one agent: give both roles to "
            f"the same worker (got {sorted(roles)})"
        )
    if "embed" not in roles and roles & STATEFUL != roles:
        raise ValueError("bad role set")


def faust_app(settings: Settings, aid: str, web_port: int | None, store: str) -> faust.App:
    """The Faust app object with SOLARIS's settings (no agents yet)."""
    datadir = settings.faust_state_root / aid
    datadir.mkdir(parents=True, exist_ok=True)
    return faust.App(
        aid,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=faust_credentials(settings),
        store=store,
        datadir=str(datadir),
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication,
        web_enabled=web_port is not None,
        web_port=web_port or 6066,
        web_bind=settings.bind_host,
        # Faust's own pages serve table contents (/table/{name}/{key}: users' histories and
        # ledgers) and the partition router to anyone who reaches the port, unauthenticated;
        # the port is there for /healthz, /readyz and /metrics only (issue 24, item 8)
        web_router_enabled=False,
        web_tables_enabled=False,
        web_graph_enabled=False,
        web_stats_enabled=False,
        consumer_auto_offset_reset="earliest",
        key_serializer="json",  # tables: int user ids -> JSON values; topics override with raw
        value_serializer="json",
        broker_commit_every=100,
        # one batch per partition goes in each produce request: 16 KiB (the default) holds a
        # few table values, so a backlog of changelog writes took many small requests
        producer_max_batch_size=256 * 1024,
        broker_commit_interval=settings.faust_commit_interval_s,
        broker_session_timeout=settings.consumer_session_timeout_s,
        broker_heartbeat_interval=settings.consumer_session_timeout_s / 3,
        table_standby_replicas=0,
        producer_acks=-1,
        producer_linger=settings.producer_linger_ms / 1000,
    )


def table_options(settings: Settings, store: str) -> dict[str, Any] | None:
    """RocksDB options of one table (a new dict each: Faust pops keys from the one it gets).

    Faust's defaults (64 MiB write buffers x 3 and a 2 GiB block cache, per table partition)
    let a worker's resident set grow with every event for GBs; these bound it (see Settings).
    """
    if not store.startswith("rocksdb"):
        return None
    mib = 2**20
    return {
        "write_buffer_size": settings.table_write_buffer_mib * mib,
        "max_write_buffer_number": 2,
        "block_cache_size": settings.table_block_cache_mib * mib,
        "block_cache_compressed_size": settings.table_block_cache_mib * mib,
    }


def create_app(
    settings: Settings,
    roles: Iterable[str],
    parts: Components,
    web_port: int | None = None,
    store: str = "rocksdb://",
) -> faust.App:
    """Build the Faust app with the agents of ``roles`` (see :data:`ROLES`); ``store`` is
    Faust's table store (``memory://`` in agent unit tests)."""
    roles = frozenset(roles)
    check_roles(roles, settings.fuse_verify)
    faust_commits.install()  # never commit past an unacked message (see the module)
    faust_fastpath.install()  # no tasks per fetched message when the app takes it at once
    faust_fetch.install(settings.consumer_fetch_min_bytes, settings.consumer_fetch_max_wait_ms)
    aid = app_id(settings, roles)
    app = faust_app(settings, aid, web_port, store)
    P = settings.topic_partitions
    topics: dict[str, Any] = {
        name: app.topic(
            settings.topic(name),
            key_type=bytes,
            value_type=bytes,
            partitions=P,
            key_serializer="raw",
            value_serializer="raw",
        )
        for name in TOPICS
    }
    tables: dict[str, Any] = {}
    if roles & STATEFUL:
        tables = {
            name: app.Table(
                name, default=None, partitions=P, options=table_options(settings, store)
            )
            for name in TABLES
        }
    clock = EventClock(settings.max_future_ms, ClockRule(settings.event_clock))
    ctx = AgentContext(app, settings, parts, topics, tables, clock, sender_for(settings, topics))
    for table in tables.values():
        install_changelog_producer(table, ctx.sender)  # librdkafka, as the agents' sends
        ctx.record_changelog(table)
    register_agents(ctx, roles, aid)
    table_expiry.register(ctx, roles)
    if web_port is not None:
        web.register_pages(ctx, bool(roles & STATEFUL))
    web.register_counter_flush(ctx)
    return app


def register_agents(ctx: AgentContext, roles: frozenset[str], aid: str) -> None:
    if "history" in roles:
        history.register(ctx)
    if "speculate" in roles:
        refresher = (
            NeighbourRefresher(ctx.settings, ctx.parts, snapshot_name(aid))
            if "neighbours" in roles and ctx.parts.stages.reps is not None
            else None
        )
        fused = verify.VerifyAgent(ctx) if ctx.settings.fuse_verify else None
        requests.register(ctx, refresher, fused)
    if "verify" in roles and not ctx.settings.fuse_verify:
        verify.register(ctx)
    if "embed" in roles:
        embed.register(ctx)
    if "aggregate" in roles:
        aggregate.register(ctx)
