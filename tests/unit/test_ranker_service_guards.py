"""The ranker keeps serving after a bad message, and its reader counters reach Prometheus per
request. ``RankerService.run`` is driven by a fake consumer (no broker); the store is in memory;
stats publishes are captured instead of written to Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY

from schemas.codec import Codec
from schemas.records import ImpressionEvent, PairEmbedding, RequestEvent
from store.errors import StoreError, StoreTimeout, StoreUnavailable
from store.memory import InMemoryStore
from store.protocol import ReadBatch, ReadResult
from store.reader import FeatureReader
from store.tiers import Tier
from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.ranker import RankResult, needs_baseline
from streams.live import ranker_service
from streams.live.ranker_service import RankerOptions, RankerService
from streams.settings import Settings

T0 = 1_700_000_000_000
HOUR = 3_600_000
DIM = 4
CODEC = Codec()
SETTINGS = Settings()


def request(n: int) -> bytes:
    return CODEC.encode(RequestEvent(f"r{n}", 7, T0 + n, "home", (1, 2, 3)))


def impression(n: int) -> bytes:
    return CODEC.encode(ImpressionEvent(f"r{n}", 7, 1, T0 + n + 1, 0, 1))


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class FakeMessage:
    def __init__(self, topic: str, value: bytes | None, offset: int) -> None:
        self._topic, self._value, self._offset = topic, value, offset

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class FakeConsumer:
    """Hands out ``messages`` in order, then stops the service (its next poll returns None)."""

    def __init__(self, messages: list[tuple[str, bytes | None]], service: RankerService) -> None:
        self._messages: Iterator[FakeMessage] = iter(
            FakeMessage(SETTINGS.topic(t), v, i) for i, (t, v) in enumerate(messages)
        )
        self._service = service
        self.closed = False

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        pass

    def poll(self, timeout: float) -> FakeMessage | None:
        msg = next(self._messages, None)
        if msg is None:
            self._service.stop()
        return msg

    def close(self) -> None:
        self.closed = True


class CapturedStats:
    """Stands in for the stats publisher thread: keeps what would go to the stats hash."""

    def __init__(self) -> None:
        self.values: list[dict[str, Any]] = []

    def put(self, value: dict[str, Any]) -> None:
        self.values.append(value)

    def close(self, timeout_s: float = 5.0) -> None:
        pass


class Scorer:
    """A ``vm_solaris`` stand-in that raises on its first ``fail`` calls."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail

    def score(self, user_ids: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("model blew up")
        return np.full(len(user_ids), 0.5, np.float32)


def make_service(
    store: InMemoryStore | None = None, scorer: Scorer | None = None, vm: Any = None
) -> RankerService:
    if store is None:  # (an empty store is falsy: it has a __len__)
        store = InMemoryStore(clock_ms=lambda: T0)
    reader = FeatureReader(store, replace(ENGINE_DEFAULTS.reader, dim=DIM))
    options = RankerOptions("g", write_scores=False, snapshot_every_s=0.0, stats_every=200)
    service = RankerService(
        SETTINGS,
        reader,
        scorer or Scorer(),  # type: ignore[arg-type]
        None,
        options,
        vm=vm or Scorer(),
    )
    service._publisher = CapturedStats()  # type: ignore[assignment]
    return service


def run(
    service: RankerService,
    messages: list[tuple[str, bytes | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> FakeConsumer:
    consumer = FakeConsumer(messages, service)
    monkeypatch.setattr(ranker_service, "make_consumer", lambda *a, **k: consumer)
    service.run()
    assert consumer.closed
    return consumer


def published(service: RankerService) -> dict[str, Any]:
    captured = service._publisher
    assert isinstance(captured, CapturedStats) and captured.values
    return captured.values[-1]


def test_malformed_requests_and_impressions_are_counted_and_the_next_ones_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = make_service()
    before = {
        t: sample("solaris_ranker_bad_messages_total", topic=t) for t in ("requests", "impressions")
    }
    failed_before = sample("solaris_ranker_failed_messages_total")
    run(
        service,
        [
            ("requests", b"\xff\x00 not avro"),
            ("requests", None),  # a tombstone
            ("requests", impression(0)),  # a valid record of the wrong type
            ("impressions", b"\x00\x01\x02"),
            ("impressions", request(0)),
            ("requests", request(1)),
            ("impressions", impression(1)),
        ],
        monkeypatch,
    )
    assert (service.bad, service.bad_impressions, service.failed) == (3, 2, 0)
    assert service.requests == 1  # the valid request after the bad ones was served
    assert service.quality.joined == 1  # and the valid impression joined to its scores
    assert sample("solaris_ranker_bad_messages_total", topic="requests") == before["requests"] + 3
    assert (
        sample("solaris_ranker_bad_messages_total", topic="impressions")
        == before["impressions"] + 2
    )
    assert sample("solaris_ranker_failed_messages_total") == failed_before
    stats = published(service)
    assert (stats["requests"], stats["bad_requests"], stats["bad_impressions"]) == (1, 3, 2)
    assert stats["failed_messages"] == 0


def test_a_request_whose_handling_raises_is_counted_and_the_next_one_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = make_service(scorer=Scorer(fail=1))
    before = sample("solaris_ranker_failed_messages_total")
    run(service, [("requests", request(1)), ("requests", request(2))], monkeypatch)
    assert (service.failed, service.requests, service.bad) == (1, 1, 0)
    assert sample("solaris_ranker_failed_messages_total") == before + 1
    assert published(service)["failed_messages"] == 1


def test_an_impression_whose_handling_raises_is_counted_and_the_next_one_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = make_service()
    on_impression = service.quality.on_impression
    calls: list[str] = []

    def raise_once(imp: ImpressionEvent) -> bool:
        calls.append(imp.request_id)
        if len(calls) == 1:
            raise ValueError("join state broken")
        return on_impression(imp)

    monkeypatch.setattr(service.quality, "on_impression", raise_once)
    messages = [("impressions", impression(1)), ("impressions", impression(2))]
    run(service, [*messages, ("requests", request(3))], monkeypatch)
    assert calls == ["r1", "r2"] and service.quality.waiting == 1  # r2 waits for its request
    assert (service.failed, service.requests) == (1, 1)


class FailingStore(InMemoryStore):
    """Every read raises ``error`` (a timed-out or unreachable store)."""

    def __init__(self, error: StoreError) -> None:
        super().__init__(clock_ms=lambda: T0)
        self.error = error

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        raise self.error


@pytest.mark.parametrize(
    ("error", "metric", "field"),
    [
        (StoreTimeout("deadline"), "solaris_reader_timeouts_total", "timeouts"),
        (StoreUnavailable("refused"), "solaris_reader_store_errors_total", "store_errors"),
    ],
)
def test_reader_errors_reach_prometheus_after_the_first_request(
    error: StoreError, metric: str, field: str
) -> None:
    service = make_service(FailingStore(error))
    before = sample(metric)
    service._handle(request(1), None)  # stats_every=200: no batch publish yet
    assert sample(metric) == before + 1
    service._handle(request(2), None)
    assert sample(metric) == before + 2
    assert service.requests == 2 and getattr(service.reader.stats, field) == 2


def test_corrupt_values_reach_prometheus_and_the_stats_hash() -> None:
    store = InMemoryStore(clock_ms=lambda: T0)
    nan = np.full(DIM, np.nan, np.float32)
    store.write_pairs([PairEmbedding.from_array(7, 1, T0 - 10, "fm", nan)], HOUR)
    service = make_service(store)
    before = sample("solaris_reader_corrupt_values_total")
    service._handle(request(1), None)
    assert sample("solaris_reader_corrupt_values_total") == before + 1
    service._publish()
    assert published(service)["corrupt_values"] == 1


class ConstantVM:
    """The plain VM stand-in: a score no ``vm_solaris`` stand-in gives."""

    def score(self, user_ids: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        return np.full(len(user_ids), 0.2, np.float32)


class RecordingProducer:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def produce(
        self, topic: str, key: bytes, value: bytes, timestamp: int, on_delivery: Any = None
    ) -> None:
        self.bodies.append(json.loads(value))


@pytest.mark.parametrize("error", [StoreTimeout("deadline"), StoreUnavailable("refused")])
def test_a_failed_read_is_served_the_plain_vm(
    error: StoreError, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(FailingStore(error), vm=ConstantVM())
    producer = RecordingProducer()
    seen: list[np.ndarray] = []  # what the live-quality join is told was served
    on_scored = service.quality.on_scored
    monkeypatch.setattr(
        service.quality,
        "on_scored",
        lambda r, i, served, vm: seen.append(served) or on_scored(r, i, served, vm),
    )
    before = sample("solaris_ranker_baseline_fallbacks_total")
    service._handle(request(1), producer)  # type: ignore[arg-type]
    body = producer.bodies[-1]
    assert body["baseline_fallback"] is True
    assert body["scores"] == pytest.approx([0.2, 0.2, 0.2]) == body["vm_scores"]
    assert sample("solaris_ranker_baseline_fallbacks_total") == before + 1
    assert seen[0] == pytest.approx([0.2, 0.2, 0.2])
    service._publish()
    assert published(service)["baseline_fallbacks"] == 1


def test_all_missing_on_a_healthy_read_keeps_vm_solaris() -> None:
    """A new user (nothing stored) is what vm_solaris was trained on: no fallback."""
    service = make_service(vm=ConstantVM())
    producer = RecordingProducer()
    service._handle(request(1), producer)  # type: ignore[arg-type]
    body = producer.bodies[-1]
    assert body["tiers"] == [Tier.MISSING] * 3 and body["baseline_fallback"] is False
    assert body["scores"] == pytest.approx([0.5, 0.5, 0.5])
    assert service.baseline_fallbacks == 0


def test_needs_baseline_only_when_the_read_failed_and_served_nothing() -> None:
    def result(tiers: list[int], failed: bool) -> RankResult:
        n = len(tiers)
        z = np.zeros(n, np.float32)
        t = np.asarray(tiers, np.uint8)
        return RankResult(
            "r", 7, np.arange(n), z, np.zeros((n, DIM)), t, z.astype(np.int64), 1.0, failed
        )

    missing, exact = int(Tier.MISSING), int(Tier.EXACT)
    assert needs_baseline(result([missing, missing], failed=True))
    assert not needs_baseline(result([exact, missing], failed=True))  # a late round 2 kept round 1
    assert not needs_baseline(result([missing, missing], failed=False))
    assert not needs_baseline(result([], failed=True))


class RefusingProducer:
    """A producer whose deliveries fail (reported at the next poll), and whose local queue is
    full once: what librdkafka does while the broker is away past the message timeout."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.full_once = True

    def produce(self, topic: str, **kwargs: Any) -> None:
        if self.full_once:
            self.full_once = False
            raise BufferError("Local: Queue full")
        self.pending.append(kwargs["on_delivery"])

    def poll(self, timeout: float = 0) -> int:
        done, self.pending = self.pending, []
        for report in done:
            report("Local: Message timed out", None)
        return len(done)

    def flush(self, timeout: float = 0) -> int:
        return self.poll()


def test_undelivered_scores_are_counted_not_lost_silently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scores producer had no delivery callback: a broker that never took them lost rows
    no counter saw. A full local queue was a failed message (skipped)."""
    service = make_service()
    service.options = replace(service.options, write_scores=True)
    producer = RefusingProducer()
    monkeypatch.setattr(ranker_service, "make_producer", lambda *a, **k: producer)
    before = sample("solaris_ranker_scores_undelivered_total")
    run(service, [("requests", request(n)) for n in range(3)], monkeypatch)
    assert service.failed == 0  # the full queue was waited out, not a failed message
    assert service.scores_undelivered == 3
    assert sample("solaris_ranker_scores_undelivered_total") - before == 3
