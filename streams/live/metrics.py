"""Prometheus metrics of workers and the ranker (one definition each, default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

DEAD_LETTERS = Counter(
    "solaris_dead_letters_total", "Messages sent to the dead-letter topic.", ["topic", "reason"]
)
PROPOSALS = Counter("solaris_proposals_total", "Pairs proposed by speculation.", ["strategy"])
VERIFIED = Counter("solaris_verified_pairs_total", "Pairs that passed verification.")
VERIFIER_DROPPED = Counter("solaris_verifier_dropped_total", "Pairs dropped by the verifier.")
EMBEDDED = Counter(
    "solaris_pairs_embedded_total", "Pairs embedded by the FM and written to the store."
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
AGGREGATES = Counter("solaris_aggregates_written_total", "User aggregates written.")
STALE_EMBEDDINGS = Counter(
    "solaris_stale_version_embeddings_total",
    "Late embeddings of a model version their user's aggregate already left (not aggregated).",
)
NEIGHBOUR_LISTS = Counter("solaris_neighbour_lists_written_total", "Neighbour lists written.")
LOOKUPS = Counter("solaris_lookups_total", "Ranker lookups by tier.", ["tier"])
READ_LATENCY = Histogram(
    "solaris_read_seconds",
    "FeatureReader.lookup latency per request.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
)
IGNORED_SNAPSHOTS = Gauge(
    "solaris_ignored_knn_snapshots",
    "KNN snapshots the ranker skipped at its last reload (another bundle's, or undecodable).",
)
READER_TIMEOUTS = Counter("solaris_reader_timeouts_total", "Lookups that hit the read deadline.")
READER_STORE_ERRORS = Counter(
    "solaris_reader_store_errors_total", "Lookups that hit a store error."
)
SPECULATION_PRECISION = Gauge(
    "solaris_speculation_precision", "Distinct embedded pairs served exact / pairs embedded."
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
