"""The ranker service: plays the production ranker so coverage is measured live.

Consumes ``requests`` (its own consumer group), and per request: one ``FeatureReader.lookup``
(≤ 2 store round trips, never raises, answers "missing" within its deadline on store trouble),
``vm_solaris`` scoring, then records tiers, read latency and scores (Prometheus, the shared
stats hash, and optionally the ``scores`` topic). Malformed requests and impressions are
counted and skipped (the pipeline's consumers own dead-lettering those topics); a message whose
handling raises is counted (``failed``), logged and skipped: one message must not stop the ranker.

Cold start: a background thread (:class:`~streams.live.snapshot_loader.SnapshotLoader`) polls
the workers' KNN snapshots every ``snapshot_every_s`` and rebuilds the cold-start index only when
they changed, off the request path; users without a neighbour list get neighbours from the
request's own candidates. Snapshots of another bundle (model version tag or dim) or undecodable
ones are skipped and counted (``ignored_snapshots``): a worker still on the old bundle must not
crash or skew the ranker. Per-request state is bounded (latency window, pending scores).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
from confluent_kafka import Consumer, KafkaError, Message, Producer

from schemas.errors import SchemaError
from schemas.records import ImpressionEvent, RequestEvent
from store.reader import FeatureReader
from store.tiers import TIER_NAMES
from streams.codecs import make_codec
from streams.engine.config import neighbour_config
from streams.engine.coverage import CoverageCounter, SpeculationLedger
from streams.engine.neighbours import ItemVectors, NeighbourIndex
from streams.engine.ranker import SolarisScorer, needs_baseline, rank
from streams.engine.verifier import PairScorer
from streams.kafka_clients import make_consumer, make_producer
from streams.live import metrics
from streams.live.quality import QualityMeter
from streams.live.snapshot_loader import SnapshotLoader
from streams.live.stats import LatestValueWriter, LiveStats, read_stats
from streams.settings import Settings

log = logging.getLogger(__name__)
#: read latencies kept for the p50/p99 the ranker publishes
READ_MS_WINDOW = 100_000


@dataclass(frozen=True, slots=True)
class RankerOptions:
    group_id: str
    write_scores: bool = True
    snapshot_every_s: float = 2.0
    stats_every: int = 200
    #: stop after this many idle seconds once at least one request was ranked (demo/tests)
    exit_when_idle_s: float | None = None


class RankerService:
    def __init__(
        self,
        settings: Settings,
        reader: FeatureReader,
        scorer: SolarisScorer | None,
        items: ItemVectors | None,
        options: RankerOptions,
        vm: PairScorer | None = None,
    ) -> None:
        self.settings = settings
        self.reader = reader
        self.scorer = scorer
        #: the plain VM, scored on the same candidates so live NE of both can be compared
        self.vm = vm
        self.quality = QualityMeter()
        self.items = items
        self.options = options
        self.codec = make_codec(settings)
        self.coverage = CoverageCounter()
        self.speculation = SpeculationLedger(horizon_ms=2 * settings.pair_ttl_ms)
        #: read latencies of the newest requests (bounded: a ranker runs for weeks)
        self.read_ms: deque[float] = deque(maxlen=READ_MS_WINDOW)
        self.requests = 0
        self.bad = 0  #: undecodable requests (skipped)
        self.bad_impressions = 0  #: undecodable impressions (skipped)
        self._assigned = 0  #: partitions held now (set by the rebalance callbacks)
        #: messages whose handling raised (logged and skipped)
        self.failed = 0
        #: ``scores`` messages the broker did not take (counted and logged, never silent)
        self.scores_undelivered = 0
        #: requests served the plain VM because their feature read failed (store outage)
        self.baseline_fallbacks = 0
        self.stats = LiveStats(settings, "ranker")
        #: publishes (stats hash, precision gauge) run on their own thread: a frozen Redis
        #: must not hold up requests (each publish may wait out a 1–2 s socket timeout)
        self._publisher: LatestValueWriter[dict[str, Any]] = LatestValueWriter(
            self._write_stats, "ranker-stats"
        )
        self._stop = threading.Event()
        #: reader error counts and served pairs already added to the Prometheus counters
        self._counted = (0, 0, 0, 0, 0)
        self._counted_served = 0
        self._published_at = 0.0  #: monotonic time of the last publish
        metrics.init_ranker_series()
        metrics.set_model_info("ranker", _served_version(scorer), reader.config.version_tag)
        #: snapshots skipped at the last reload (another bundle's, or undecodable)
        self.snapshots = (
            SnapshotLoader(
                reader.store,
                items,
                neighbour_config(settings),
                reader.config.version_tag,
                self._install_cold_start,
                options.snapshot_every_s,
            )
            if items is not None
            else None
        )

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        s = self.settings
        consumer = make_consumer(
            s,
            self.options.group_id,
            {
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
            },
        )
        producer = make_producer(s, {"linger.ms": 20}) if self.options.write_scores else None
        # Impressions too: joined to the scores served, they give the live NE (QualityMeter).
        consumer.subscribe(
            [s.topic("requests"), s.topic("impressions")],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
        )
        idle_since = time.monotonic()
        if self.snapshots is not None:
            self.snapshots.start()
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    self._publish_if_stale()
                    if (
                        self.options.exit_when_idle_s is not None
                        and self.requests
                        and time.monotonic() - idle_since > self.options.exit_when_idle_s
                    ):
                        break
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error", extra={"error": str(error)})
                    continue
                idle_since = time.monotonic()
                self._dispatch(msg, producer)
                if producer is not None:
                    producer.poll(0)
        finally:
            if self.snapshots is not None:
                self.snapshots.stop()
            self._publish()
            consumer.close()
            if producer is not None:
                producer.flush(10)
            self._publisher.close()
            self.stats.close()

    def _dispatch(self, msg: Message, producer: Producer | None) -> None:
        """One consumed message. Whatever it does, the ranker keeps serving the next ones:
        a failure is counted, logged with its traceback and skipped."""
        try:
            if msg.topic() == self.settings.topic("impressions"):
                self._on_impression(msg.value())
            else:
                self._handle(msg.value(), producer)
        except Exception:  # one bad message must not stop the ranker
            self.failed += 1
            metrics.RANKER_FAILED_MESSAGES.inc()
            log.exception(
                "ranker failed on a message; skipped",
                extra={"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()},
            )

    def _handle(self, value: bytes | None, producer: Producer | None) -> None:
        try:
            request = self.codec.decode(value, RequestEvent)
        except SchemaError as exc:
            self.bad += 1
            metrics.RANKER_BAD_MESSAGES.labels("requests").inc()
            log.warning("skipping malformed request", extra={"reason": exc.reason})
            return
        result = rank(request, self.reader, self.scorer)
        vm_scores = self._vm_scores(request, result.item_ids)
        fallback = needs_baseline(result) and len(vm_scores) == len(result.item_ids)
        served = vm_scores if fallback else result.scores
        if fallback:
            self.baseline_fallbacks += 1
            metrics.RANKER_BASELINE_FALLBACKS.inc()
        self.quality.on_scored(request.request_id, result.item_ids, served, vm_scores)
        self.requests += 1
        self.read_ms.append(result.read_ms)
        self.coverage.add(result.tiers)
        self.speculation.on_served(
            request.user_id, result.item_ids, result.ages_ms, result.tiers, request.event_time_ms
        )
        metrics.READ_LATENCY.observe(result.read_ms / 1000.0)
        metrics.observe_served(result.tiers, result.ages_ms)
        self._count_per_request()
        if producer is not None:
            body = {
                "request_id": request.request_id,
                "user_id": request.user_id,
                "event_time_ms": request.event_time_ms,
                "items": result.item_ids.tolist(),
                "scores": served.tolist(),
                "vm_scores": vm_scores.tolist(),
                "tiers": result.tiers.tolist(),
                "baseline_fallback": fallback,
                # the read failed and vm_solaris scored the rows with its own baseline (vm_kd when it
                # ships with the KD loss, else the fair vm)
                "baseline_in_graph": result.baseline_in_graph,
            }
            self._send_scores(producer, request, json.dumps(body).encode())
        if self.requests % self.options.stats_every == 0:
            self._publish()
        else:
            self._publish_if_stale()

    def _send_scores(self, producer: Producer, request: RequestEvent, value: bytes) -> None:
        """Queue one ``scores`` message; its delivery is checked (``_on_scores_delivered``) and
        a full local queue is drained before queuing again, not raised as a failed message."""
        while True:
            try:
                producer.produce(
                    self.settings.topic("scores"),
                    key=str(request.user_id).encode(),
                    value=value,
                    timestamp=request.event_time_ms,
                    on_delivery=self._on_scores_delivered,
                )
                return
            except BufferError:
                producer.poll(0.05)

    def _on_scores_delivered(self, err: Any, msg: Any) -> None:
        """librdkafka's report for one ``scores`` message (runs in ``poll``, this thread)."""
        if err is None:
            return
        self.scores_undelivered += 1
        metrics.RANKER_SCORES_UNDELIVERED.inc()
        log.warning(
            "a scores message was not delivered",
            extra={"error": str(err), "undelivered": self.scores_undelivered},
        )

    def _on_impression(self, value: bytes | None) -> None:
        try:
            imp = self.codec.decode(value, ImpressionEvent)
        except SchemaError:
            self.bad_impressions += 1  # the pipeline's history consumer dead-letters it
            metrics.RANKER_BAD_MESSAGES.labels("impressions").inc()
            return
        joined = self.quality.on_impression(imp)
        metrics.LIVE_QUALITY_IMPRESSIONS.labels(str(joined).lower()).inc()
        ne = self.quality.ne() if joined else None
        if ne is not None:
            for model, value_ in ne.items():
                metrics.LIVE_NE.labels(model).set(value_)

    def _vm_scores(self, request: RequestEvent, items: np.ndarray) -> np.ndarray:
        """The plain VM on the request's candidates (empty without a VM)."""
        if self.vm is None or not len(items):
            return np.zeros(0, np.float32)
        n = len(items)
        return self.vm.score(
            np.full(n, request.user_id, np.int64),
            items,
            np.full(n, request.event_time_ms, np.int64),
        )

    def _on_assign(self, consumer: Consumer, partitions: list[Any]) -> None:
        self._assigned = len(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[Any]) -> None:
        self._assigned = 0

    def readiness(self) -> dict[str, bool]:
        """What ``/readyz`` reports: partitions assigned (from the rebalance callbacks: no
        Kafka call from the probe's thread) and the store reachable."""
        return {
            "partitions_assigned": self._assigned > 0,
            "store_reachable": bool(self.reader.store.ping()),
        }

    @property
    def ignored_snapshots(self) -> int:
        """KNN snapshots skipped at the last reload (another bundle's, or undecodable)."""
        return self.snapshots.ignored if self.snapshots is not None else 0

    def _install_cold_start(self, index: NeighbourIndex) -> None:
        self.reader.cold_start = index  # one assignment: lookups see the old or the new index

    def _publish_if_stale(self) -> None:
        """Publish when the last publish is a second old: between two ``stats_every`` batches
        (slow traffic, or none) the shared counters and gauges stay at most a second behind,
        so a progress line (the demo's "ranked N") is not up to ``stats_every`` requests stale."""
        if self.requests and time.monotonic() - self._published_at >= 1.0:
            self._publish()

    def _publish(self) -> None:
        self._published_at = time.monotonic()
        metrics.IGNORED_SNAPSHOTS.set(self.ignored_snapshots)
        st = self.reader.stats
        counts = dict(
            zip((f"lookups_{n}" for n in TIER_NAMES), self.coverage.counts.tolist(), strict=True)
        )
        self._publisher.put(
            {
                **counts,
                "requests": self.requests,
                "bad_requests": self.bad,
                "bad_impressions": self.bad_impressions,
                "failed_messages": self.failed,
                "scores_undelivered": self.scores_undelivered,
                "baseline_fallbacks": self.baseline_fallbacks,
                "reader_internal_errors": st.internal_errors,
                "corrupt_values": st.corrupt_values,
                "ignored_snapshots": self.ignored_snapshots,
                "served_distinct": self.speculation.served,
                "timeouts": st.timeouts,
                "store_errors": st.store_errors,
                "read_ms_p50": float(np.percentile(self.read_ms, 50)) if self.read_ms else 0.0,
                "read_ms_p99": float(np.percentile(self.read_ms, 99)) if self.read_ms else 0.0,
                "quality_joined": self.quality.joined,
                "quality_unjoined": self.quality.unjoined,
                **{f"live_ne_{k}": v for k, v in (self.quality.ne() or {}).items()},
            }
        )

    def _write_stats(self, values: dict[str, Any]) -> None:
        """The publisher thread's half of :meth:`_publish`: the shared hash, then the gauge."""
        self.stats.set(values)
        self._set_precision()

    def _count_per_request(self) -> None:
        """Add this request's reader errors, corrupt values and newly served pairs to the
        Prometheus counters (per request, so an alert sees a store outage at once, not 200
        requests later)."""
        st = self.reader.stats
        now = (
            st.timeouts,
            st.store_errors,
            st.internal_errors,
            st.corrupt_values,
            st.state_decode_errors,
        )
        counters = (
            metrics.READER_TIMEOUTS,
            metrics.READER_STORE_ERRORS,
            metrics.READER_INTERNAL_ERRORS,
            metrics.READER_CORRUPT_VALUES,
            metrics.READER_STATE_DECODE_ERRORS,
        )
        for counter, new, old in zip(counters, now, self._counted, strict=True):
            if new > old:
                counter.inc(new - old)
        self._counted = now
        served = self.speculation.served
        if served > self._counted_served:
            metrics.SERVED_EXACT_PAIRS.inc(served - self._counted_served)
            self._counted_served = served

    def _set_precision(self) -> None:
        """Speculation precision = distinct pairs served exact / pairs embedded. The FM workers
        count embedded pairs in the shared stats hash (another process), so the gauge is set
        here at publish time; a Redis hiccup leaves the last value."""
        try:
            embedded = read_stats(self.settings)["pipeline"].get("embedded", 0.0)
        except redis.RedisError:
            return
        if embedded > 0:
            metrics.SPECULATION_PRECISION.set(self.speculation.served / embedded)


def _served_version(scorer: SolarisScorer | None) -> str:
    """The model version in the scorer's ONNX metadata (``vm_solaris`` carries its bundle's),
    else "unknown" (a scorer that is not an ONNX session, e.g. in tests)."""
    session = getattr(scorer, "session", None)
    metadata = getattr(session, "metadata", None)
    if isinstance(metadata, dict):
        return str(metadata.get("model_version", "unknown"))
    return "unknown"
