"""Consumer lag as Prometheus gauges: what ``solaris exporter`` serves on ``/metrics``.

One process polls :class:`~streams.lag.LagReader` (committed vs end offsets, never joining a
group) every ``interval_s`` and keeps the newest rows; Prometheus scrapes the rows of the last
successful poll. Lag is measured outside the workers so a stalled or dead worker still shows up
(its group's lag grows), which a worker exporting its own lag could not report.

Exported (own registry, so only these appear):
- ``solaris_consumer_lag_messages{group,topic,partition}``: end offset - committed offset
  (the whole partition when the group committed nothing on it);
- ``solaris_lag_exporter_up``: 1 when the last poll succeeded, else 0;
- ``solaris_lag_exporter_last_success_timestamp_seconds``: wall time of the last good poll;
- ``solaris_lag_exporter_poll_errors_total``: polls that failed (broker unreachable, ...).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.errors import StreamsError
from streams.lag import LagReader, PartitionLag
from streams.settings import Settings

log = logging.getLogger(__name__)

LAG = "solaris_consumer_lag_messages"
UP = "solaris_lag_exporter_up"
LAST_SUCCESS = "solaris_lag_exporter_last_success_timestamp_seconds"
POLL_ERRORS = "solaris_lag_exporter_poll_errors"  # exported with the _total suffix


class LagCollector(Collector):
    """Holds the rows of the last good poll; thread-safe (the HTTP thread reads them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[PartitionLag] = []
        self._up = 0
        self._last_success = 0.0
        self._errors = 0

    def update(self, rows: Sequence[PartitionLag]) -> None:
        with self._lock:
            self._rows = list(rows)
            self._up = 1
            self._last_success = time.time()

    def failed(self) -> None:
        """A poll failed: keep the last rows (Prometheus marks them stale by the timestamp and
        ``up``), so a broker hiccup does not look like zero lag."""
        with self._lock:
            self._up = 0
            self._errors += 1

    def describe(self) -> Iterable[Metric]:
        """The families without samples (the registry learns the names without a poll)."""
        return list(self._families([], 0, 0.0, 0))

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            rows, up, last, errors = self._rows, self._up, self._last_success, self._errors
        return list(self._families(rows, up, last, errors))

    @staticmethod
    def _families(
        rows: Sequence[PartitionLag], up: int, last: float, errors: int
    ) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            LAG,
            "Messages a consumer group has not committed yet, per topic partition.",
            labels=["group", "topic", "partition"],
        )
        for r in rows:
            lag.add_metric([r.group, r.topic, str(r.partition)], float(r.lag))
        yield lag
        g = GaugeMetricFamily(UP, "1 when the exporter's last poll of the broker succeeded.")
        g.add_metric([], float(up))
        yield g
        g = GaugeMetricFamily(LAST_SUCCESS, "Unix time of the exporter's last successful poll.")
        g.add_metric([], last)
        yield g
        c = CounterMetricFamily(POLL_ERRORS, "Exporter polls of the broker that failed.")
        c.add_metric([], float(errors))
        yield c


class LagExporter:
    """Polls lag in a background thread and serves it; ``start()`` then ``stop()``.

    ``groups`` fixes the groups to watch; by default every group whose id starts with the topic
    prefix, listed again at each poll (groups appear as workers start).
    """

    def __init__(
        self,
        settings: Settings,
        interval_s: float | None = None,
        groups: Sequence[str] | None = None,
        reader_factory: Callable[[Settings], LagReader] = LagReader,
    ) -> None:
        self.settings = settings
        self.interval_s = settings.exporter_interval_s if interval_s is None else interval_s
        self.groups = list(groups) if groups else None
        self.collector = LagCollector()
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self.collector)
        self._reader_factory = reader_factory
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-exporter", daemon=True)
        self._server: Any = None

    def start(self, port: int | None = None) -> LagExporter:
        """Serve ``/metrics`` on ``bind_host:port`` (default ``exporter_port``) and poll."""
        port = self.settings.exporter_port if port is None else port
        self._server, _ = start_http_server(
            port, addr=self.settings.bind_host, registry=self.registry
        )
        self._thread.start()
        log.info("lag exporter serving", extra={"port": port, "interval_s": self.interval_s})
        return self

    def request_stop(self) -> None:
        """Ask :meth:`wait` to return (safe from a signal handler: only sets an event)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop polling and serving; idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def wait(self) -> None:
        """Block until :meth:`stop` (from a signal handler)."""
        while not self._stop.wait(0.5):
            pass

    def poll_once(self, reader: LagReader) -> None:
        try:
            rows = reader.lag(self.groups if self.groups is not None else reader.groups())
        except (StreamsError, KafkaException) as exc:  # watermark reads raise KafkaException
            self.collector.failed()
            log.warning("lag poll failed", extra={"error": str(exc)})
            return
        self.collector.update(rows)

    def _run(self) -> None:
        reader = self._reader_factory(self.settings)
        try:
            while not self._stop.is_set():
                self.poll_once(reader)
                self._stop.wait(self.interval_s)
        finally:
            reader.close()
