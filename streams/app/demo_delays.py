"""Per-request pipeline delays of a timed demo run, in event time, recorded as they happen.

A timed replay compresses event time, so the pipeline's wall latency becomes minutes of event
time, and the demo compares live coverage with the simulator run that far behind the reads
(``streams.app.demo_offline``). The timeline's probe (newest request replayed vs newest embedding
written) measures the *age of the newest embedding* against the *replay*: it adds the gap since
the last FM write, and it ignores that the ranker, too, reads a little after the replay produced
(at 700× its few messages of lag are tens of seconds of event time). This recorder notes, for
every request, when its ``verified`` and ``embeddings`` messages appeared on the *ranker's*
clock: the event time of the newest request the ranker had scored (its ``scores`` messages, read
by the same consumer). The pairs are then served from the ranker's next request on, exactly as
the simulator's ``delays`` hook (:mod:`streams.simulate.latency`) applies a delay.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from schemas.errors import SchemaError
from schemas.records import EmbeddingBatch, ProposalBatch
from streams.app.demo_offline import MeasuredDelays
from streams.codecs import make_codec
from streams.kafka_clients import make_consumer
from streams.settings import Settings

#: the topics whose arrivals are timed, and the record each carries
TIMED_TOPICS: dict[str, type] = {"verified": ProposalBatch, "embeddings": EmbeddingBatch}
#: the ranker's output: its event times are the clock
CLOCK_TOPIC = "scores"


@dataclass
class Arrivals:
    """First arrival of each request's message per topic: request id → (event time, ranker's
    clock, replay's clock) at arrival. The replay's clock (the last message produced) is kept
    for comparison: it ignores the ranker's own lag behind the replay."""

    by_topic: dict[str, dict[str, tuple[int, int, int]]] = field(
        default_factory=lambda: {t: {} for t in TIMED_TOPICS}
    )
    undecodable: int = 0
    scored: int = 0  #: ``scores`` messages read (none: the ranker's clock never ran)

    def add(
        self, topic: str, request_id: str, event_time_ms: int, clock_ms: int, replay_ms: int = 0
    ) -> None:
        self.by_topic[topic].setdefault(request_id, (event_time_ms, clock_ms, replay_ms))

    def delays(self, clock: str = "ranker") -> MeasuredDelays:
        """Event-time delay of each request (``clock`` at arrival − its event time, never < 0);
        ``clock`` is ``ranker`` or ``replay``."""
        col = {"ranker": 1, "replay": 2}[clock]

        def of(topic: str) -> dict[str, int]:
            return {rid: max(row[col] - row[0], 0) for rid, row in self.by_topic[topic].items()}

        times = {rid: row[0] for rows in self.by_topic.values() for rid, row in rows.items()}
        return MeasuredDelays(of("embeddings"), of("verified"), times)

    def outputs(self, log_dir: Path, timed: bool) -> dict[str, Any]:
        """The demo summary's entries: ``request_delays`` (a :class:`MeasuredDelays`, not JSON:
        ``solaris demo`` pops it for its offline run; None in lockstep), the raw arrivals'
        file, and the delays on the replay's clock for comparison."""
        clock = "ranker" if self.scored else "replay"  # a ranker that wrote no scores
        return {
            "request_delays": self.delays(clock) if timed else None,
            "arrivals_json": str(self.write(log_dir / "arrivals.json")),
            "pipeline_delays_replay_clock_s": self.delays("replay").summary_s(),
        }

    def write(self, path: Path) -> Path:
        """The raw arrivals as JSON (``{topic: {request_id: [t, ranker, replay]}}``)."""
        path.write_text(json.dumps(self.by_topic))
        return path

    @classmethod
    def read(cls, path: Path) -> Arrivals:
        raw = json.loads(path.read_text())
        by_topic = {t: {rid: tuple(row) for rid, row in raw[t].items()} for t in TIMED_TOPICS}
        return cls(by_topic)  # type: ignore[arg-type]


class ArrivalRecorder:
    """``with ArrivalRecorder(settings) as rec: <replay, drain>``; then ``rec.arrivals``.

    Reads the run's ``scores``, ``verified`` and ``embeddings`` topics from their beginning
    (fresh topics of this run) with an unsubscribed consumer that joins no group and commits
    nothing, one message at a time (a batch read would hold messages back), and stamps each
    verified/embeddings message with the newest scored event time read before it. Never raises
    into the replay: a message it cannot decode is counted and skipped.
    """

    def __init__(self, settings: Settings, replay_clock: Callable[[], int] | None = None) -> None:
        self.settings = settings
        self.replay_clock = replay_clock
        self.clock_ms = 0  #: event time of the newest request the ranker had scored
        self.arrivals = Arrivals()
        self._codec = make_codec(settings)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ArrivalRecorder:
        self._thread = threading.Thread(target=self._run, name="demo-arrivals", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _run(self) -> None:
        names = {self.settings.topic(t): t for t in (*TIMED_TOPICS, CLOCK_TOPIC)}
        consumer = make_consumer(
            self.settings, "solaris-demo-arrivals", {"enable.auto.commit": False}
        )
        try:
            meta = consumer.list_topics(timeout=10).topics
            consumer.assign(
                [
                    TopicPartition(topic, p, OFFSET_BEGINNING)
                    for topic in names
                    for p in (meta[topic].partitions if topic in meta else ())
                ]
            )
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                topic = msg.topic() if msg is not None else None
                if msg is not None and msg.error() is None and topic in names:
                    self._record(names[topic], msg.value())
        except KafkaException:
            return  # the comparison then falls back to the probe's latency
        finally:
            consumer.close()

    def _record(self, topic: str, value: bytes | None) -> None:
        try:
            if topic == CLOCK_TOPIC:
                scored = int(json.loads(value or b"")["event_time_ms"])
                self.clock_ms = max(self.clock_ms, scored)
                self.arrivals.scored += 1
                return
            rec: ProposalBatch | EmbeddingBatch = self._codec.decode(value, TIMED_TOPICS[topic])
        except (SchemaError, ValueError, KeyError, TypeError):
            self.arrivals.undecodable += 1
            return
        replay_ms = self.replay_clock() if self.replay_clock is not None else 0
        self.arrivals.add(topic, rec.request_id, rec.event_time_ms, self.clock_ms, replay_ms)
