"""The feature server's Prometheus metrics, in a registry of its own (one per server).

Names follow the project's conventions (:mod:`streams.live.metrics`): base units, ``_total``
counters. ``format`` is ``json`` or ``binary`` (what the ``Accept`` header asked for).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from store.tiers import TIER_NAMES
from streams.serve.protocol import READ_ERRORS

#: request latencies from a fraction of a millisecond to past any sane deadline
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
FORMATS = ("json", "binary")


class ServeMetrics:
    """Counters and histograms of one server; :meth:`exposition` is the ``/metrics`` body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "solaris_serve_requests_total",
            "Feature requests answered, by HTTP status and answer format.",
            ["status", "format"],
            registry=r,
        )
        self.latency = Histogram(
            "solaris_serve_request_seconds",
            "Feature request latency in the server (body read to answer encoded), by format.",
            ["format"],
            buckets=BUCKETS,
            registry=r,
        )
        self.lookup_latency = Histogram(
            "solaris_serve_lookup_seconds",
            "FeatureReader.lookup latency inside the server (bounded by the read deadline).",
            buckets=BUCKETS,
            registry=r,
        )
        self.lookups = Counter(
            "solaris_serve_lookups_total", "Items served, by tier.", ["tier"], registry=r
        )
        help_ = {
            "timeout": "Lookups that hit the read deadline (rows not read are missing).",
            "store_error": "Lookups that hit a store error (rows not read are missing).",
            "internal_error": "Lookups that hit an unexpected error (served as missing).",
        }
        self.read_errors = {
            name: Counter(f"solaris_serve_reader_{name}s_total", help_[name], registry=r)
            for name in READ_ERRORS
        }
        for fmt in FORMATS:
            self.latency.labels(fmt)
            self.requests.labels("200", fmt)
        for tier in TIER_NAMES:
            self.lookups.labels(tier)

    def observe_request(self, status: int, fmt: str, seconds: float) -> None:
        self.requests.labels(str(status), fmt).inc()
        self.latency.labels(fmt).observe(seconds)

    def observe_lookup(self, tiers: list[int], seconds: float, read_error: str | None) -> None:
        self.lookup_latency.observe(seconds)
        for code in set(tiers):
            self.lookups.labels(TIER_NAMES[code]).inc(tiers.count(code))
        if read_error is not None:
            self.read_errors[read_error].inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
