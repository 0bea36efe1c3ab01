"""The one typed settings object of SOLARIS.

Built once in an entry point (CLI, worker) and passed down; nothing else reads the environment.
Every field maps to an env var ``SOLARIS_<FIELD>`` (e.g. ``SOLARIS_KAFKA_BOOTSTRAP``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

HOUR_MS = 3_600_000
RankBy = Literal["recurrence", "vm", "prior", "vm_x_prior"]
"""What orders the pairs the verifier keeps per request (see ``streams.engine.verifier``)."""
REPO_ROOT = Path(__file__).resolve().parent.parent


#: variables of the shell scripts under ``infra/`` (their own knobs, not settings of the code)
SCRIPT_VARIABLES = frozenset(
    {
        "SOLARIS_PYTHON",
        "SOLARIS_BOOTSTRAP_PYTHON",
        "SOLARIS_EXTRAS",
        "SOLARIS_KAFKA_PORT",
        "SOLARIS_KAFKA_CONTROLLER_PORT",
        "SOLARIS_KAFKA_DATA_DIR",
        "SOLARIS_KAFKA_HEAP",
        "SOLARIS_KAFKA_LOG_LINES",
        "SOLARIS_KAFKA_START_TIMEOUT",
        "SOLARIS_KAFKA_STOP_TIMEOUT",
        "SOLARIS_KAFKA_FRESH",
        "SOLARIS_KAFKA_WARN_PARTITIONS",
        "SOLARIS_SERVICES_KAFKA_DATA_DIR",  # infra/with-services.sh: its own broker's data dir
        "SOLARIS_REDIS_PORT",
        "SOLARIS_REDIS_DATA_DIR",
        "SOLARIS_REDIS_START_TIMEOUT",
        "SOLARIS_REDIS_STOP_TIMEOUT",
        "SOLARIS_TEST_INFRA",  # tests/integration/containers.py: local (default) | containers
        "SOLARIS_PROMETHEUS_PORT",
        "SOLARIS_PROMETHEUS_DATA_DIR",
        "SOLARIS_PROMETHEUS_TARGETS",
        "SOLARIS_PROMETHEUS_SCRAPE_INTERVAL",
        "SOLARIS_PROMETHEUS_START_TIMEOUT",
        "SOLARIS_PROMETHEUS_STOP_TIMEOUT",
        "SOLARIS_REDIS_CLUSTER_PORTS",
        "SOLARIS_REDIS_CLUSTER_DIR",
    }
)


#: names Kubernetes gives a pod for every Service of its namespace (``enableServiceLinks``): a
#: Service ``solaris-exporter`` becomes ``SOLARIS_EXPORTER_SERVICE_HOST``,
#: ``SOLARIS_EXPORTER_PORT_9104_TCP_ADDR``, ... which carry our prefix without being settings
_SERVICE_LINK_NAME = re.compile(
    r"^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$"
)
#: ``<SERVICE>_PORT=tcp://10.96.0.12:9104`` (docker-link style): clashes with a real ``*_PORT``
#: setting by name (``SOLARIS_EXPORTER_PORT``), but a port setting is never such a URL
_SERVICE_LINK_URL = re.compile(r"^(tcp|udp|sctp)://[^/\s]+:\d+$")


def is_service_link(name: str, value: str | None) -> bool:
    """Whether ``name=value`` is a variable Kubernetes injected for a Service (not a setting)."""
    upper = name.upper()
    if _SERVICE_LINK_NAME.match(upper):
        return True
    return upper.endswith("_PORT") and value is not None and bool(_SERVICE_LINK_URL.match(value))


class _EnvWithoutServiceLinks(EnvSettingsSource):
    """The environment source, minus Kubernetes' service-link variables."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = super()._load_env_vars()
        return {k: v for k, v in env.items() if not is_service_link(k, v)}


def _default_data_dir() -> Path:
    return (REPO_ROOT.parent / "shared" / "data").resolve()


class Settings(BaseSettings):
    """All SOLARIS knobs with their defaults; docs/configuration.md is generated from them."""

    model_config = SettingsConfigDict(env_prefix="SOLARIS_", frozen=True, extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The usual sources, but the environment without Kubernetes' service links."""
        env = _EnvWithoutServiceLinks(settings_cls)
        return init_settings, env, dotenv_settings, file_secret_settings

    @model_validator(mode="after")
    def _no_unknown_variables(self) -> Settings:
        """A misspelt ``SOLARIS_*`` variable would otherwise be ignored silently (the default
        applies and nobody notices): refuse to start and name it."""
        unknown = unknown_variables(os.environ)
        if unknown:
            raise ValueError(
                f"unknown environment variables {unknown}: not a SOLARIS setting (see "
                "docs/configuration.md); unset or correct them"
            )
        return self

    # --- Network ------------------------------------------------------------------------------
    bind_host: str = Field(
        "127.0.0.1",
        description=(
            "Address the Prometheus metrics endpoints and the Faust web server listen on "
            "(loopback by default; 0.0.0.0 to expose them, e.g. to a Prometheus in a cluster)."
        ),
    )
    exporter_port: int = Field(
        9104, gt=0, lt=65536, description="Port of `solaris exporter`'s /metrics (consumer lag)."
    )
    exporter_interval_s: float = Field(
        5.0, gt=0, description="How often `solaris exporter` reads the groups' committed offsets."
    )
    serve_port: int = Field(
        8300, gt=0, lt=65536, description="Port of `solaris serve` (the HTTP feature server)."
    )
    serve_threads: int = Field(
        4,
        gt=0,
        le=256,
        description="Lookups `solaris serve` runs at once, each thread with its own reader and "
        "store connections (more requests wait for a free thread).",
    )
    serve_model_version: str = Field(
        "",
        description="`solaris serve` serves only values of this FM model version (the bundle's, "
        "as the ranker does); empty = any version.",
    )

    # --- Kafka ---------------------------------------------------------------------------------
    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers.")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="How every Kafka client (librdkafka and Faust) talks to brokers."
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "SCRAM-SHA-512", description="SASL mechanism (used with SASL_PLAINTEXT / SASL_SSL)."
    )
    kafka_sasl_username: str = Field("", description="SASL user (required with SASL_*).")
    kafka_sasl_password: SecretStr = Field(
        SecretStr(""), description="SASL password (never logged or printed)."
    )
    kafka_ssl_cafile: Path | None = Field(
        None, description="PEM CA bundle that signs the brokers' certificates (SSL / SASL_SSL)."
    )
    kafka_ssl_certfile: Path | None = Field(
        None, description="PEM client certificate for mutual TLS (with kafka_ssl_keyfile)."
    )
    kafka_ssl_keyfile: Path | None = Field(
        None, description="PEM private key of kafka_ssl_certfile (unencrypted)."
    )
    schema_registry_url: str = Field(
        "",
        pattern=r"^(https?://\S+)?$",
        description="Confluent-compatible schema registry (e.g. `infra/schema_registry.sh url`): "
        "every producer and consumer encodes with the ids it assigns, one subject per topic "
        "(`<topic>-value`), registered and compatibility-checked at startup. Empty = the private "
        "ids of schemas/registry.py (offline fallback). See docs/schema-registry.md.",
    )
    topic_prefix: str = Field("solaris", description="Prefix of every topic name.")
    topic_partitions: int = Field(4, ge=1, description="Partitions of each SOLARIS topic.")
    topic_replication: int = Field(1, ge=1, description="Replication factor of created topics.")
    topic_retention_ms: int = Field(
        -1,
        ge=-1,
        description=(
            "Time retention of created topics (-1 = none). Records carry *event* times, so with "
            "time retention a replay of old traffic is deleted at the broker's next retention "
            "check, consumed or not."
        ),
    )
    topic_retention_bytes: int = Field(
        1 << 30, ge=-1, description="Size retention per partition of created topics (-1 = none)."
    )

    # --- store -----------------------------------------------------------------------------------
    store_backend: Literal["redis", "redis-cluster", "aerospike", "memory"] = Field(
        "redis", description="Keyed-store backend (redis-cluster: store_url names one seed node)."
    )
    store_url: str = Field(
        "redis://127.0.0.1:6379/0",
        repr=False,  # may hold a password: see store.urls.redact_url for logs
        description="Redis URL of the store (redis://user:password@host:port/db, rediss:// for TLS).",
    )
    redis_wait_replicas: int = Field(
        0,
        ge=0,
        description="Redis and Redis Cluster: a write counts as stored only once this many "
        "replicas of its master confirm it (WAIT); fewer within the wait timeout fail the write "
        "and it is retried. 0 = the master's acknowledgement (asynchronous replication: a "
        "failover may lose the newest writes). With 1 replica per master, a dead master's slots "
        "take no writes until a replica rejoins the promoted one.",
    )
    redis_wait_timeout_ms: int = Field(
        500, gt=0, description="How long a write waits for redis_wait_replicas confirmations."
    )
    aerospike_hosts: str = Field(
        "", description="Comma-separated host:port of Aerospike seeds; empty = not configured."
    )
    aerospike_namespace: str = Field("test", description="Aerospike namespace.")
    aerospike_user: str = Field("", description="Aerospike user (security enabled); empty = none.")
    aerospike_password: SecretStr = Field(
        SecretStr(""), description="Aerospike password (never logged or printed)."
    )
    aerospike_tls_name: str = Field(
        "", description="TLS name of the Aerospike nodes' certificates; non-empty = TLS on."
    )
    aerospike_tls_cafile: Path | None = Field(
        None, description="PEM CA bundle that signs the Aerospike nodes' certificates."
    )
    key_prefix: str = Field("sol", description="Prefix of every store key.")
    pair_ttl_ms: int = Field(4 * HOUR_MS, gt=0, description="Freshness TTL of pair embeddings.")
    aggregate_window_ms: int = Field(
        24 * HOUR_MS, gt=0, description="Rolling event-time window of user aggregates."
    )
    aggregate_bucket_ms: int = Field(
        HOUR_MS,
        gt=0,
        description="Bucket of the rolling aggregate window: a pair leaves the window within "
        "one bucket of its age passing the window.",
    )
    aggregate_ttl_ms: int = Field(
        24 * HOUR_MS, gt=0, description="Freshness TTL of a user aggregate after its newest pair."
    )
    neighbour_aggregate_ttl_ms: int = Field(
        7 * 24 * HOUR_MS,
        gt=0,
        description="Max age of a neighbour's aggregate in the neighbour tier.",
    )
    neighbour_ttl_ms: int = Field(24 * HOUR_MS, gt=0, description="Freshness TTL of neighbours.")
    state_tier: bool = Field(
        True,
        description="Serve the state tier: the FM worker stores each verified request's user "
        "state and the ranker decodes it for candidates without an exact pair (needs a bundle "
        "with fm_state.onnx and fm_decode.onnx; off without them).",
    )
    state_ttl_ms: int = Field(
        24 * HOUR_MS, gt=0, description="Freshness TTL of a user's stored FM state."
    )
    history_store_ttl_ms: int = Field(
        30 * 24 * HOUR_MS,
        gt=0,
        description="Store TTL of a user's history (a fair VM's streaming features; written only "
        "when the bundle's vm_solaris reads them): a user idle longer looks new to the ranker.",
    )
    read_deadline_ms: float = Field(20.0, gt=0, description="Ranker read deadline per request.")
    reader_max_neighbour_pair_keys: int = Field(
        2_000,
        ge=0,
        description="Cap on (neighbour, item) pair keys in the reader's second round trip; above "
        "it only the neighbours' aggregates are read.",
    )
    reader_neighbour_hints: int = Field(
        0,
        ge=0,
        description="Users a ranker's reader remembers with the neighbours their last lookup "
        "read, to read them in the first round trip when the user comes back (0 = off).",
    )

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
            "prior), VM score, item prior, or prior x VM."
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
            "How the workers' agents produce: librdkafka (confluent-kafka, Faust's key hash; "
            "~4 us a message) or Faust's own producer (aiokafka; ~200 us a message, measured "
            "in the FM worker). Both deliver before a batch's events are acked."
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

    # --- limits ----------------------------------------------------------------------------------
    max_candidates: int = Field(1_000, gt=0, description="Largest accepted candidate list.")

    # --- local infra -----------------------------------------------------------------------------
    cache_dir: Path = Field(
        Path.home() / ".cache" / "solaris", description="Cache of venvs, jars, runtime data."
    )
    state_dir: Path | None = Field(
        None,
        description=(
            "Faust table state (RocksDB) of the workers, one folder per consumer group (default: "
            "<cache_dir>/run/faust). Workers on one host need one each: RocksDB locks its files."
        ),
    )
    data_dir: Path = Field(default_factory=_default_data_dir, description="Real datasets.")
    log_level: str = Field("INFO", description="Log level of SOLARIS loggers.")
    log_json: bool = Field(
        False, description="Logs as JSON lines (as --log-json), e.g. for a cluster's log shipper."
    )
    require_services: bool = Field(
        False, description="Tests: fail (not skip) integration tests when Kafka/Redis are down."
    )

    def topic(self, name: str) -> str:
        """Full topic name of a logical topic (``requests`` -> ``solaris.requests``)."""
        return f"{self.topic_prefix}.{name}"

    @property
    def faust_state_root(self) -> Path:
        """Where the workers keep Faust's table state (``state_dir`` or its default)."""
        return self.state_dir or self.cache_dir / "run" / "faust"

    @property
    def aggregate_store_ttl_ms(self) -> int:
        """Physical TTL of stored aggregates: as long as any tier may still read them."""
        return max(self.aggregate_ttl_ms, self.neighbour_aggregate_ttl_ms)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``SOLARIS_*`` names in ``environ`` that are neither a setting nor a script variable."""
    known = {f"SOLARIS_{name.upper()}" for name in Settings.model_fields} | SCRIPT_VARIABLES
    return sorted(
        k
        for k, v in environ.items()
        if k.upper().startswith("SOLARIS_") and k.upper() not in known and not is_service_link(k, v)
    )
