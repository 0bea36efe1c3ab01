"""Settings of the services SOLARIS talks to: network binds, Kafka and the keyed store.

A section of :class:`streams.settings.Settings` (which inherits these fields; each is the env
var ``SOLARIS_<FIELD>``). Kept apart so each settings module stays one readable page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from streams.settings_units import HOUR_MS


class ServiceFields(BaseModel):
    """Network, Kafka and store settings."""

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
    serve_max_waiting: int = Field(
        64,
        ge=0,
        description="Requests `solaris serve` lets wait for a free reader thread; one more is "
        "answered 503 at once (overloaded) instead of queuing.",
    )
    serve_max_wait_ms: float = Field(
        100.0,
        gt=0,
        description="The longest a request waits for a reader thread; past it, it is answered "
        "503 without a lookup (its client has given up), so threads serve live requests.",
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
    aggregate_max_keys: int = Field(
        20_000,
        ge=0,
        description="Most (item, event time) keys a user's rolling aggregate keeps to tell a "
        "redelivered embedding from a new one (~21.3 bytes each in the table value: 20,000 keep "
        "it near 430 kB, under Kafka's 1 MB message limit). Past it the oldest buckets are "
        "sealed: their sums stay, their keys go, and embeddings arriving late into them are "
        "dropped and counted (a redelivery could not be told apart). 0: no limit.",
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
