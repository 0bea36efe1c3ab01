"""Prometheus metrics of workers and the ranker (one definition each, default registry).

Names follow Prometheus conventions (base units, ``_total`` counters, ``_info`` for versions).
The consumer-lag gauges are not here: ``solaris exporter`` (:mod:`streams.lag_exporter`) serves
them from its own registry, so no worker polls the broker's group coordinator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Info

from store.tiers import TIER_NAMES, Tier

DEAD_LETTERS = Counter(
    "solaris_dead_letters_total", "Messages sent to the dead-letter topic.", ["topic", "reason"]
)
PROPOSALS = Counter("solaris_proposals_total", "Pairs proposed by speculation.", ["strategy"])
VERIFIED = Counter("solaris_verified_pairs_total", "Pairs that passed verification.")
VERIFIER_DROPPED = Counter("solaris_verifier_dropped_total", "Pairs dropped by the verifier.")
EMBEDDED = Counter(
    "solaris_pairs_embedded_total", "Pairs embedded by the FM and written to the store."
)
PAIRS_SHED = Counter(
    "solaris_pairs_shed_total",
    "Verified pairs the FM worker dropped unembedded: their message was dated more than the "
    "pair TTL before its shed clock (SOLARIS_SHED_CLOCK), so they could never be served exact.",
)
STATES_STORED = Counter(
    "solaris_user_states_stored_total",
    "User FM states written for the state tier (one per user per FM group).",
)
STATE_ERRORS = Counter(
    "solaris_user_state_errors_total",
    "User states not stored: the state model failed on a group, or a state was not finite "
    "in the stored dtype (the user keeps its older state; pairs are unaffected).",
    ["reason"],
)
FM_BATCH_SIZE = Histogram(
    "solaris_fm_batch_size", "Pairs per FM call.", buckets=(1, 8, 16, 32, 64, 128, 256, 512, 1024)
)
FM_LATENCY = Histogram(
    "solaris_fm_batch_seconds",
    "FM call latency.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
STORE_ERRORS = Counter("solaris_store_errors_total", "Store errors (writes are retried).", ["op"])
TRUNCATED_OFFSETS = Counter(
    "solaris_truncated_offsets_total",
    "Offsets removed from the log (retention, delete_records) before an agent processed them.",
    ["topic"],
)
AGENT_BATCH_RETRIES = Counter(
    "solaris_agent_batch_retries_total",
    "Agent batches that failed on an infrastructure error and were run again (or, at the "
    "last try, made the worker exit without acking them).",
    ["agent"],
)
AGGREGATES = Counter("solaris_aggregates_written_total", "User aggregates written.")
STALE_WRITES_SKIPPED = Counter(
    "solaris_store_stale_writes_skipped_total",
    "Pair/aggregate writes the store refused because it held a newer event time (e.g. a "
    "resumed zombie worker's old batch; store.conditional_writes).",
    ["kind"],
)


def count_stale_skipped(store: object, before: int, kind: str) -> int:
    """Add the store's skipped-stale writes since ``before`` to the counter; returns the total."""
    now = int(getattr(store, "stale_skipped", 0))
    if now > before:
        STALE_WRITES_SKIPPED.labels(kind).inc(now - before)
    return now


FOREIGN_STATE_RESETS = Counter(
    "solaris_foreign_state_resets_total",
    "Saved per-user state refused as another model's (version tag or dimension) and started "
    "afresh, by kind (e.g. representation: after a model upgrade).",
    ["kind"],
)


def count_foreign_resets(n: int, kind: str) -> None:
    if n > 0:
        FOREIGN_STATE_RESETS.labels(kind).inc(n)


TABLE_USERS_EXPIRED = Counter(
    "solaris_table_users_expired_total",
    "Users deleted from a Faust table because their value can change no output any more "
    "(streams.engine.steps.expiry), by table.",
    ["table"],
)
TABLE_SWEEP_FAILURES = Counter(
    "solaris_table_sweep_failures_total",
    "Table sweeps that failed (logged; tried again at the next interval), by table.",
    ["table"],
)
STALE_EMBEDDINGS = Counter(
    "solaris_stale_version_embeddings_total",
    "Late embeddings of a model version their user's aggregate already left (not aggregated).",
)
SEALED_EMBEDDINGS = Counter(
    "solaris_sealed_bucket_embeddings_total",
    "Embeddings dropped because their aggregate bucket was sealed for the key budget "
    "(SOLARIS_AGGREGATE_MAX_KEYS).",
)
AGGREGATE_KEYS_DROPPED = Counter(
    "solaris_aggregate_keys_dropped_total",
    "Keys dropped from user aggregates to keep each within SOLARIS_AGGREGATE_MAX_KEYS.",
)
NEIGHBOUR_LISTS = Counter("solaris_neighbour_lists_written_total", "Neighbour lists written.")
NEIGHBOUR_REFRESH_SECONDS = Histogram(
    "solaris_neighbour_refresh_seconds",
    "Wall time of one neighbour refresh (index build + lists), in its own thread.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
)
NEIGHBOUR_REFRESH_OVER_BUDGET = Counter(
    "solaris_neighbour_refresh_over_budget_total",
    "Neighbour refreshes longer than SOLARIS_NEIGHBOUR_REFRESH_BUDGET_S.",
)
LOOKUPS = Counter("solaris_lookups_total", "Ranker lookups by tier.", ["tier"])
READ_LATENCY = Histogram(
    "solaris_read_seconds",
    "FeatureReader.lookup latency per request.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
)
# Gauges only the ranker sets are not registered at import: workers import this module too, and
# would export a constant 0 beside the ranker's value (a bogus series on every panel and query).
# The ranker registers them (init_ranker_series).
IGNORED_SNAPSHOTS = Gauge(
    "solaris_ignored_knn_snapshots",
    "KNN snapshots the ranker skipped at its last reload (another bundle's, or undecodable).",
    registry=None,
)
READER_TIMEOUTS = Counter(
    "solaris_reader_timeouts_total", "Requests whose lookup hit the read deadline."
)
READER_STORE_ERRORS = Counter(
    "solaris_reader_store_errors_total", "Requests whose lookup hit a store error."
)
READER_INTERNAL_ERRORS = Counter(
    "solaris_reader_internal_errors_total",
    "Requests whose lookup hit an unexpected error (served as missing).",
)
READER_CORRUPT_VALUES = Counter(
    "solaris_reader_corrupt_values_total",
    "Stored values the ranker's reader rejected (checksum, format, bounds, NaN): never served.",
)
READER_STATE_DECODE_ERRORS = Counter(
    "solaris_reader_state_decode_errors_total",
    "State-tier decodes that failed or were not finite (those candidates got the next tier).",
)
#: labelled by logical topic (requests, impressions); the pipeline dead-letters these messages
RANKER_BAD_MESSAGES = Counter(
    "solaris_ranker_bad_messages_total",
    "Undecodable messages the ranker skipped, by topic.",
    ["topic"],
)
RANKER_SCORES_UNDELIVERED = Counter(
    "solaris_ranker_scores_undelivered_total",
    "Scores messages the broker did not take (after the producer's own retries).",
)
RANKER_FAILED_MESSAGES = Counter(
    "solaris_ranker_failed_messages_total",
    "Messages whose handling raised in the ranker (logged and skipped; the ranker kept going).",
)
RANKER_BASELINE_FALLBACKS = Counter(
    "solaris_ranker_baseline_fallbacks_total",
    "Requests served the plain VM's scores because their feature read failed and served nothing.",
)
#: event-time ages from seconds (exact pairs of the last request) to days (neighbour aggregates)
AGE_BUCKETS = (1, 10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800)
SERVED_AGE = Histogram(
    "solaris_served_feature_age_seconds",
    "Event-time age of each served embedding at its request's event time, by tier.",
    ["tier"],
    buckets=AGE_BUCKETS,
)
SPECULATION_PRECISION = Gauge(
    "solaris_speculation_precision",
    "Distinct embedded pairs served exact / pairs embedded (all FM workers), set by the ranker.",
    registry=None,
)
RANKER_GAUGES = (IGNORED_SNAPSHOTS, SPECULATION_PRECISION)
_ranker_registered: list[bool] = []
SERVED_EXACT_PAIRS = Counter(
    "solaris_speculation_served_pairs_total",
    "Distinct embedded pairs this ranker served as exact at least once (precision numerator).",
)
MODEL = Info(
    "solaris_model", "Model bundle a process serves (version and its store tag).", ["role"]
)
LIVE_NE = Gauge(
    "solaris_live_ne",
    "Running NE of the ranker's scores over the impressions joined to them (model: vm, "
    "vm_solaris_served).",
    ["model"],
)
LIVE_QUALITY_IMPRESSIONS = Counter(
    "solaris_live_quality_impressions_total",
    "Impressions the ranker consumed, by whether they joined a ranked request's scores.",
    ["joined"],
)


def bound(metric: Any) -> Callable[..., Any]:
    """``labels(...)`` of ``metric`` with each label set's child kept: hot paths skip
    prometheus_client's per-call label validation and lock."""
    children: dict[tuple[str, ...], Any] = {}

    def child(*labels: str) -> Any:
        try:
            return children[labels]
        except KeyError:
            found = children[labels] = metric.labels(*labels)
            return found

    return child


#: tiers that serve a value (an age); "missing" has none
SERVED_TIERS = tuple(name for code, name in enumerate(TIER_NAMES) if code != Tier.MISSING)


def init_ranker_series() -> None:
    """Register the ranker-only gauges (once per process) and create every tier's (and each
    bad-message topic's) series at 0, so rates and alerts see a tier before its first lookup
    (a labelled series that does not exist yet makes ``rate`` silently empty)."""
    if not _ranker_registered:
        for gauge in RANKER_GAUGES:
            REGISTRY.register(gauge)
        _ranker_registered.append(True)
    for name in TIER_NAMES:
        LOOKUPS.labels(name)
    for name in SERVED_TIERS:
        SERVED_AGE.labels(name)
    for topic in ("requests", "impressions"):
        RANKER_BAD_MESSAGES.labels(topic)


def observe_served(tiers: np.ndarray, ages_ms: np.ndarray) -> None:
    """Lookups by tier and the age of every served value of one request.

    ``tiers`` uint8 [n] (:class:`~store.tiers.Tier` codes), ``ages_ms`` int64 [n] (-1 where
    missing). One ``observe`` per served candidate: cheap next to the lookup itself.
    """
    for code, count in enumerate(np.bincount(tiers, minlength=len(TIER_NAMES))):
        if not count:
            continue
        name = TIER_NAMES[code]
        LOOKUPS.labels(name).inc(int(count))
        if code == Tier.MISSING:
            continue
        child = SERVED_AGE.labels(name)
        for age in (ages_ms[tiers == code] / 1000.0).tolist():
            child.observe(age)


def set_model_info(role: str, version: str, version_tag: int | None) -> None:
    """``solaris_model_info{role, version, version_tag} 1`` for this process."""
    MODEL.labels(role).info(
        {"version": version, "version_tag": "" if version_tag is None else str(version_tag)}
    )
