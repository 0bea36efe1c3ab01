"""Settings of the models and the engine: bundles, speculation, verification, embedding,
tiers, workers.

A section of :class:`streams.settings.Settings` (which inherits these fields; each is the env
var ``SOLARIS_<FIELD>``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from streams.settings_units import HOUR_MS, RankBy


class EngineFields(BaseModel):
    """Model and engine settings."""

    # --- models ----------------------------------------------------------------------------------
    model_dir: Path = Field(
        Path.home() / ".cache" / "solaris" / "models", description="Trained models and ONNX files."
    )
    embedding_dim: int = Field(64, gt=0, description="FM interaction-embedding dimension d.")
    history_len: int = Field(20, gt=0, description="Last-L interactions fed to the FM.")
    vm_user_features: bool = Field(
        True,
        description="Train the ranking VMs (vm, vm_kd, vm_solaris) as the fair VM: they also read "
        "streaming user features from the last-L history (models.user_features); the id-only VM "
        "is reported as vm_id_only and stays the verifier. Live, the history agent then writes "
        "each user's history to the store and the ranker reads it in the same round trip.",
    )
    vm_solaris_kd: Literal["off", "loss", "blend"] = Field(
        "blend",
        description="How the shipped vm_solaris also uses tuned KD: blend = the FM-fed VM and "
        "vm_kd blended on logits, the weight chosen on validation rows (one graph; ~15 % more "
        "ranker scoring time); loss = trained with the KD loss as well (KD weight chosen on "
        "validation, 0 allowed); off = FM embeddings only. `solaris evaluate` reports each "
        "choice's bar on your data (docs/knowledge-transfer.md).",
    )
    embed_batch_size: int = Field(
        128, gt=0, description="Verified messages taken per FM micro-batch (each holds many pairs)."
    )
    embed_batch_pairs: int = Field(
        1024,
        gt=0,
        description="Most pairs per FM call: a micro-batch with more is split (bounded latency "
        "and memory per call, e.g. GPU memory).",
    )
    embed_max_wait_ms: int = Field(50, ge=0, description="FM micro-batch max wait (wall clock).")
    shed_clock: Literal["off", "wall"] = Field(
        "off",
        description="What the FM worker sheds stale work against: off (never), or the wall "
        "clock: a verified message dated more than SOLARIS_PAIR_TTL_MS before it is dropped "
        "before the FM (counted, solaris_pairs_shed_total): its pairs could never be served "
        "exact. Set wall only where event time follows the wall clock (live traffic): a replay "
        "of old traffic would be shed whole.",
    )
    onnx_providers: str = Field(
        "",
        description=(
            "Comma-separated onnxruntime execution providers, e.g. 'CUDAExecutionProvider,"
            "CPUExecutionProvider'; empty = CUDA when available, else CPU. An explicit provider "
            "that is not available is an error (no silent fall-back to CPU)."
        ),
    )
    onnx_threads: int = Field(
        1, ge=0, description="onnxruntime intra-op threads (0 = ORT default)."
    )

    # --- engine ---------------------------------------------------------------------------------
    speculation_strategies: str = Field(
        "candidates", description="Comma-separated speculation strategies (candidates, lookahead)."
    )
    speculation_budget: int = Field(0, ge=0, description="Max proposals per request (0 = no cap).")
    speculation_lookahead_items: int = Field(
        10, ge=0, description="Look-ahead proposals per request (the lookahead strategy only)."
    )
    refresh_after_ms: int = Field(
        2 * HOUR_MS, ge=0, description="Do not re-embed a pair embedded less than this ago."
    )
    pair_in_flight_timeout_ms: int = Field(
        30 * 60_000,
        ge=0,
        description=(
            "How long (event time) a verified pair counts as on its way to the store. Past it, "
            "a pair whose vector never came back in the embeddings topic (shed, dead-lettered, "
            "lost in an FM failure) may be proposed again; a pair whose vector came back is not "
            "re-proposed before SOLARIS_REFRESH_AFTER_MS. At or above that setting the rule is "
            "off: a verified pair is not re-proposed before it, stored or not."
        ),
    )
    verifier_threshold: float | None = Field(None, description="Min VM score to embed a pair.")
    verifier_top_k: int | None = Field(None, description="Max verified pairs per request.")
    verifier_top_fraction: float | None = Field(
        0.5, description="Max verified pairs per request as a share of its candidates."
    )
    verifier_rank_by: RankBy = Field(
        "recurrence",
        description=(
            "Order of pairs kept per request: recurrence (user's recent candidate lists + item "
            "prior), pair (the user's recent candidate lists only: every input is stored "
            "per-user state), VM score, item prior, or prior x VM."
        ),
    )
    verifier_pair_memory_ms: int = Field(
        4 * HOUR_MS,
        gt=0,
        description=(
            "How long a user's candidate list counts in the recurrence and pair rankings "
            "(event time); the stored pair memory is deleted this long (plus the table "
            "expiry grace) after the user's last request."
        ),
    )
    neighbours_k: int = Field(8, gt=0, description="Neighbours per user in the neighbour tier.")
    neighbour_exact_max: int = Field(
        5_000,
        ge=0,
        description="Users up to which neighbour search is exact (brute force); above, hnswlib.",
    )
    train_on_engine_tiers: bool = Field(
        True,
        description=(
            "Train the shipped vm_solaris on the tiers and vectors the serving engine reads "
            "(replaying the traffic through it per seed); false = the offline construction."
        ),
    )
    neighbour_min_similarity: float = Field(
        0.5,
        ge=-1.0,
        lt=1.0,
        description=(
            "Cosine similarity (of centred user representations) a neighbour must exceed to serve "
            "in the neighbour tiers (neighbour lists and the ranker's cold-start queries). 0.5 "
            "measured on ml-latest-small: +neighbours coverage 0.986 -> 0.976, transfer ratio at "
            "achieved coverage 0.578 -> 0.631 (vs 0.0)."
        ),
    )
    neighbour_interval_ms: int = Field(
        10 * 60_000, gt=0, description="Event-time interval between neighbour-index rebuilds."
    )
    neighbour_refresh_budget_s: float = Field(
        10.0,
        gt=0,
        description="Wall time a neighbour refresh (its own thread) may take before it is logged "
        "and counted as over budget (solaris_neighbour_refresh_over_budget_total).",
    )
    neighbour_growth_factor: float = Field(
        2.0,
        ge=1.0,
        description=(
            "Also rebuild the neighbour index once the users with an aggregate have grown by this "
            "factor since the last build (fills a cold index fast; 1 = interval only)."
        ),
    )
    faust_commit_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often Faust workers commit offsets (lower = faster drain checks).",
    )
    table_write_buffer_mib: int = Field(
        1,
        gt=0,
        description="RocksDB write buffer (memtable) of each Faust table partition, 2 per "
        "partition. Faust's default, 64 MiB x 3, grew a pipeline worker's RSS by 1.6 KB per event "
        "for the whole of a 2-hour replay (solaris bench memory): 4 tables x its partitions each "
        "fill their own buffers before the first flush.",
    )
    table_block_cache_mib: int = Field(
        1,
        gt=0,
        description="RocksDB block cache of each Faust table partition (Faust's default: 2 GiB "
        "each). A worker's table memory is bounded by 4 tables x partitions owned x "
        "(2 x write buffer + block cache).",
    )
    malloc_release_kib: int = Field(
        64,
        ge=0,
        description="Workers set glibc's mmap and trim thresholds to this many KiB at start "
        "(mallopt), so freed heap memory goes back to the OS instead of staying resident after "
        "a burst of large transient arrays (bench memory, short lifetimes: end / half 1.103 with "
        "glibc's defaults, 1.019 with 64 KiB); 0 = the allocator's defaults. No-op off glibc.",
    )
    table_sweep_interval_s: float = Field(
        300.0,
        ge=0,
        description="How often (wall clock) a pipeline worker deletes the dead users of its "
        "ledger and aggregates tables (streams.engine.steps.expiry: values that can change no "
        "output any more); 0 = never. Bounds the tables' disk and changelog recovery by the "
        "active users, not every user ever seen.",
    )
    table_expiry_grace_ms: int = Field(
        24 * HOUR_MS,
        ge=0,
        description="Event time past a table value's own lifetime (pair TTL for the ledger, "
        "the aggregate window for aggregates) before it is deleted: the window in which a "
        "redelivered message is still recognised as one.",
    )
    agent_sends: Literal["librdkafka", "faust"] = Field(
        "librdkafka",
        description=(
            "How the workers' agents and table changelogs produce: librdkafka "
            "(confluent-kafka, Faust's key hash; ~4 us a message) or Faust's own producer "
            "(aiokafka; ~200 us a message, measured in the FM worker). Both deliver before a "
            "batch's events are acked."
        ),
    )
    producer_linger_ms: float = Field(
        5.0,
        ge=0.0,
        le=1000.0,
        description=(
            "How long the workers' Kafka producer waits to fill a batch before sending. A few "
            "ms turns many small produce requests into few (FM worker: +20 % pairs/s, -12 % "
            "CPU per pair measured); each hop of a message gains at most this much latency."
        ),
    )
    producer_message_timeout_ms: int = Field(
        300_000,
        ge=1_000,
        le=2_147_483_647,
        description=(
            "How long the workers' Kafka producer keeps trying to deliver a message (librdkafka's "
            "message.timeout.ms; its default, 5 min). A broker away for longer fails the "
            "delivery: the agent then runs its whole batch again (SOLARIS_AGENT_BATCH_ATTEMPTS) "
            "and never acks it undelivered."
        ),
    )
    consumer_session_timeout_s: float = Field(
        45.0,
        ge=6.0,
        le=1800.0,
        description=(
            "Consumer-group session timeout of the workers: how long a crashed worker keeps "
            "its partitions before the group gives them to another (Kafka's default; Faust's "
            "own is 60 s). Heartbeats go every third of it. The broker allows 6–1800 s."
        ),
    )
    fuse_verify: bool = Field(
        False,
        description=(
            "Verify each batch of requests in the speculate agent, right after speculating it, "
            "instead of through the `speculated` topic and a verify agent: one hop fewer per "
            "request (no produce, fetch, decode and changelog of its own). Needs the "
            "`speculate` and `verify` roles in the same worker; nothing is sent to `speculated`."
        ),
    )
    consumer_fetch_min_bytes: int = Field(
        1,
        ge=1,
        le=52_428_800,
        description=(
            "Bytes the broker gathers before it answers one of the workers' fetches (Kafka's "
            "fetch.min.bytes; Faust leaves aiokafka's 1: a fetch per few messages at low rates)."
        ),
    )
    consumer_fetch_max_wait_ms: int = Field(
        1500,
        ge=0,
        le=60_000,
        description=(
            "Longest the broker holds one of the workers' fetches to gather "
            "SOLARIS_CONSUMER_FETCH_MIN_BYTES (Kafka's fetch.max.wait.ms; Faust's 1500): at most "
            "this much latency per hop when traffic is thin."
        ),
    )
    agent_batch_size: int = Field(
        256,
        gt=0,
        description="Messages a pipeline agent takes per batch (one VM call, one store "
        "pipeline, deliveries awaited once per batch).",
    )
    agent_batch_max_wait_ms: int = Field(
        10, ge=0, description="How long an agent waits to fill a batch (wall clock)."
    )
    agent_batch_attempts: int = Field(
        8,
        ge=1,
        description="Tries of an agent batch that fails on an infrastructure error (Kafka "
        "refused or unreachable, a failed delivery) before the worker exits without acking it "
        "(exit status 75); tries back off exponentially from 0.5 s, /readyz is 503 meanwhile.",
    )
    agent_batch_max_backoff_s: float = Field(
        30.0, gt=0, description="Longest wait between two tries of a failed agent batch."
    )
    max_future_ms: int = Field(
        HOUR_MS,
        gt=0,
        description="Events dated more than this ahead of the event clock (SOLARIS_EVENT_CLOCK) "
        "are dead-lettered as future_event_time.",
    )
    event_clock: Literal["wall", "partition"] = Field(
        "wall",
        description="What SOLARIS_MAX_FUTURE_MS counts from: the wall clock, or min(the "
        "partition's event-time high-water mark, wall clock) (also refuses events far ahead of a "
        "replay of old traffic, but a gap in a partition's log longer than the bound too).",
    )
    bundle_dir: Path | None = Field(
        None,
        description="Trained model bundle to serve; unset = the only bundle under model_dir "
        "(several there and none pinned is an error: every process must serve the same one).",
    )
    bundle_url: str = Field(
        "",
        description="http(s) URL of a bundle archive (`solaris models pack`) that `solaris models "
        "fetch` downloads into model_dir, e.g. in a Kubernetes init container; empty = none.",
    )
    bundle_sha256: str = Field(
        "",
        pattern=r"^([0-9a-fA-F]{64})?$",
        description="SHA-256 (hex) the archive at bundle_url must have (`solaris models pack` "
        "prints it); `solaris models fetch` refuses any other archive.",
    )
