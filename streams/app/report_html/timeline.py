"""What a demo run looked like over time: lag per consumer group and the live counters, sampled
once a second in a background thread while the replay runs.

The report plots these samples (coverage by tier and FM pairs per request per interval, lag per
group); the demo prints the newest one as progress. Sampling never raises: a failed probe (broker
or Redis busy) leaves a gap in the series, it must not stop the replay it watches.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import redis
from confluent_kafka import KafkaException, TopicPartition

from store.tiers import TIER_NAMES
from streams.errors import StreamsError
from streams.kafka_clients import make_consumer
from streams.lag import LagReader
from streams.live.stats import read_stats
from streams.settings import Settings


@dataclass(frozen=True, slots=True)
class Sample:
    """One probe. ``t_s``: seconds since the timeline started (replay start)."""

    t_s: float
    replayed: int  #: requests the replay had produced by then
    lag: dict[str, int]  #: max lag over topics/partitions, per consumer group
    requests: int  #: requests the ranker had ranked (its last published count)
    lookups: dict[str, int]  #: the ranker's lookups per tier so far (cumulative)
    embedded: int  #: pairs the FM workers had embedded so far (cumulative)
    #: event time of the newest request replayed, and of the newest embedding written (the
    #: ``embeddings`` topic's last message); their difference is the pipeline's latency in
    #: event time (0 = not known yet)
    replayed_event_ms: int = 0
    embedded_event_ms: int = 0

    @property
    def behind_ms(self) -> int | None:
        """How far (event time) the FM's newest write trails the newest request replayed."""
        if not self.replayed_event_ms or not self.embedded_event_ms:
            return None
        return max(self.replayed_event_ms - self.embedded_event_ms, 0)

    @property
    def max_lag(self) -> int:
        return max(self.lag.values(), default=0)


@dataclass
class Timeline:
    """``with Timeline(settings, groups, topics) as tl: ...; tl.replayed = n`` from the replay's
    progress callback; afterwards ``tl.samples`` (oldest first) and :meth:`as_json`."""

    settings: Settings
    groups: list[str]
    topics: list[str]
    every_s: float = 1.0
    replayed: int = 0  #: set by the replaying thread (one int: no lock needed)
    replayed_event_ms: int = 0  #: likewise: event time of the newest request replayed
    produced_event_ms: int = 0  #: event time of the last message produced (any topic)
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _start: float = 0.0

    def __enter__(self) -> Timeline:
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="demo-timeline", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    @property
    def last(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    @property
    def max_lag(self) -> int:
        return max((s.max_lag for s in self.samples), default=0)

    def as_json(self) -> list[dict[str, Any]]:
        return [{**asdict(s), "behind_ms": s.behind_ms} for s in self.samples]

    def behind_ms(self, until_s: float | None = None) -> list[int]:
        """The pipeline's event-time latency of each sample (up to ``until_s``) that has one."""
        return [
            b
            for s in self.samples
            if (until_s is None or s.t_s <= until_s) and (b := s.behind_ms) is not None
        ]

    def _run(self) -> None:
        reader = LagReader(self.settings)
        newest = NewestEventTime(self.settings, self.settings.topic("embeddings"))
        per_group: dict[str, set[str]] | None = None
        try:
            while not self._stop.is_set():
                if per_group is None:
                    per_group = self._assigned(reader)
                # newest embedding first, the replay's position right after: a write that
                # lands while the first is read can only make the latency look larger
                embedded_ms = newest.read()
                replayed_ms = self.replayed_event_ms
                sample = self._probe(reader, per_group) if per_group is not None else None
                if sample is not None:
                    self.samples.append(
                        replace(
                            sample, embedded_event_ms=embedded_ms, replayed_event_ms=replayed_ms
                        )
                    )
                self._stop.wait(self.every_s)
        finally:
            reader.close()
            newest.close()

    def _assigned(self, reader: LagReader) -> dict[str, set[str]] | None:
        """The wanted topics each group consumes (the ranker reads no ``speculated``): asking a
        group about a topic it never reads would count that topic's whole length as lag."""
        try:
            assigned = reader.assigned(self.groups)
        except StreamsError:
            return None
        wanted = set(self.topics)
        return {g: ts & wanted for g, ts in assigned.items()}

    def _probe(self, reader: LagReader, per_group: dict[str, set[str]]) -> Sample | None:
        t = time.monotonic() - self._start
        replayed = self.replayed
        lag = dict.fromkeys(self.groups, 0)
        try:
            for group, topics in per_group.items():
                for row in reader.lag([group], topics) if topics else ():
                    lag[group] = max(lag[group], row.lag)
            stats = read_stats(self.settings)
        except (StreamsError, redis.RedisError):
            return None
        ranker, pipeline = stats["ranker"], stats["pipeline"]
        return Sample(
            t_s=round(t, 3),
            replayed=replayed,
            lag=lag,
            requests=int(ranker.get("requests", 0.0)),
            lookups={n: int(ranker.get(f"lookups_{n}", 0.0)) for n in TIER_NAMES},
            embedded=int(pipeline.get("embedded", 0.0)),
        )


class NewestEventTime:
    """The newest event time (Kafka message timestamp) on a topic: the last message of each
    partition, read by an unsubscribed consumer (it joins no group and commits nothing)."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self._consumer = make_consumer(
            settings, "solaris-demo-newest", {"enable.auto.commit": False}
        )

    def close(self) -> None:
        self._consumer.close()

    def read(self, timeout_s: float = 1.0) -> int:
        """Max over partitions of the last message's timestamp (0 when empty or unreadable)."""
        try:
            meta = self._consumer.list_topics(self.topic, timeout=timeout_s).topics[self.topic]
            wanted = []
            for p in meta.partitions:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=timeout_s
                )
                if high > low:
                    wanted.append(TopicPartition(self.topic, p, high - 1))
            if not wanted:
                return 0
            self._consumer.assign(wanted)
            msgs = self._consumer.consume(len(wanted), timeout=timeout_s)
        except (KafkaException, KeyError):
            return 0
        return max((m.timestamp()[1] for m in msgs if m.error() is None), default=0)
