"""The lag exporter when a poll fails: ``up`` drops to 0, the last rows stay, errors are counted.

Keeping the rows matters: dropping them would make a broker hiccup look like zero lag on the
dashboard (and silence the lag alert), while ``up == 0`` and the stale success timestamp say the
numbers are old. A scripted reader stands in for :class:`~streams.lag.LagReader` (the real one
is exercised live in tests/integration/test_prometheus.py).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from functools import partial

from confluent_kafka import KafkaError, KafkaException
from prometheus_client.parser import text_string_to_metric_families

from streams.errors import KafkaUnavailable
from streams.lag import LagReader, PartitionLag
from streams.lag_exporter import LAG, LAST_SUCCESS, UP, LagExporter
from streams.settings import Settings
from tests.ports import free_port

ERRORS = "solaris_lag_exporter_poll_errors_total"
ROWS = [
    PartitionLag("p-pipeline", "p.requests", 0, 3, 10),
    PartitionLag("p-fm", "p.verified", 1, 5, 5),
]
NEWER = [PartitionLag("p-pipeline", "p.requests", 0, 9, 12)]


class ScriptedReader:
    """Answers ``lag`` with the next scripted rows or raises the next scripted exception
    (the last entry repeats)."""

    def __init__(self, script: Sequence[list[PartitionLag] | Exception]) -> None:
        self.script = list(script)
        self.polls = 0
        self.closed = False

    def groups(self, prefix: str | None = None) -> list[str]:
        return ["p-pipeline", "p-fm"]

    def lag(self, groups: object, topics: object = None) -> list[PartitionLag]:
        step = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        if isinstance(step, Exception):
            raise step
        return step

    def close(self) -> None:
        self.closed = True


def samples(exporter: LagExporter) -> dict[str, object]:
    reg = exporter.registry
    lag = {
        (s.labels["group"], s.labels["topic"], s.labels["partition"]): s.value
        for f in reg.collect()
        if f.name == LAG
        for s in f.samples
    }
    return {
        "lag": lag,
        "up": reg.get_sample_value(UP),
        "last": reg.get_sample_value(LAST_SUCCESS),
        "errors": reg.get_sample_value(ERRORS),
    }


def lag_of(rows: list[PartitionLag]) -> dict[tuple[str, str, str], float]:
    return {(r.group, r.topic, str(r.partition)): float(r.lag) for r in rows}


def test_a_failed_poll_keeps_the_rows_drops_up_and_counts_the_error() -> None:
    broker_down = KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "all brokers down"))
    reader = ScriptedReader([ROWS, KafkaUnavailable("cannot list groups"), broker_down, NEWER])
    exporter = LagExporter(Settings(), interval_s=1.0)
    fake: LagReader = reader  # type: ignore[assignment]

    exporter.poll_once(fake)
    good = samples(exporter)
    assert good["lag"] == lag_of(ROWS) and good["up"] == 1 and good["errors"] == 0
    assert isinstance(good["last"], float) and good["last"] > 0

    exporter.poll_once(fake)  # KafkaUnavailable (a StreamsError)
    assert samples(exporter) == {**good, "up": 0, "errors": 1}  # same rows, same timestamp
    exporter.poll_once(fake)  # a raw KafkaException (watermark reads)
    assert samples(exporter) == {**good, "up": 0, "errors": 2}

    exporter.poll_once(fake)  # the broker is back: new rows, up again, errors stay counted
    back = samples(exporter)
    assert back["lag"] == lag_of(NEWER) and back["up"] == 1 and back["errors"] == 2
    assert isinstance(back["last"], float) and back["last"] >= good["last"]


def scrape(port: int) -> dict[str, float]:
    """The served /metrics: unlabelled samples by name, lag rows as ``name{group}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            group = sample.labels.get("group")
            out[f"{sample.name}{{{group}}}" if group else sample.name] = sample.value
    return out


class GatedReader(ScriptedReader):
    """A scripted reader whose each poll waits for :meth:`step`: the test decides when the
    background thread polls, so every state is observed, not raced."""

    def __init__(self, script: Sequence[list[PartitionLag] | Exception]) -> None:
        super().__init__(script)
        self.gate = threading.Semaphore(0)

    def step(self) -> None:
        self.gate.release()

    def lag(self, groups: object, topics: object = None) -> list[PartitionLag]:
        assert self.gate.acquire(timeout=10), "the test never released this poll"
        return super().lag(groups, topics)


def errors_are(n: float, metrics: dict[str, float]) -> bool:
    return metrics[ERRORS] == n


def wait_scrape(port: int, done: Callable[[dict[str, float]], bool]) -> dict[str, float]:
    deadline, last = time.monotonic() + 10, {}
    while time.monotonic() < deadline:
        last = scrape(port)
        if done(last):
            return last
        time.sleep(0.01)
    raise AssertionError(f"metrics never got there: {last}")


def test_the_polling_thread_survives_a_failure_and_serves_it() -> None:
    """Through ``start()`` and HTTP: while polls fail the served /metrics say up=0 and count
    the errors but still carry the old rows; the next good poll brings up=1 and new rows."""
    reader = GatedReader([ROWS, KafkaUnavailable("down"), KafkaUnavailable("down"), NEWER])

    def factory(_settings: Settings) -> LagReader:
        return reader  # type: ignore[return-value]

    exporter = LagExporter(Settings(), interval_s=0.01, reader_factory=factory)
    port = free_port()
    exporter.start(port)
    try:
        reader.step()
        up = wait_scrape(port, lambda m: m[UP] == 1)
        assert (up[f"{LAG}{{p-pipeline}}"], up[f"{LAG}{{p-fm}}"], up[ERRORS]) == (7, 0, 0)
        for n in (1.0, 2.0):
            reader.step()
            down = wait_scrape(port, partial(errors_are, n))
            assert down[UP] == 0, down
            assert {k: v for k, v in down.items() if k.startswith(LAG)} == {
                k: v for k, v in up.items() if k.startswith(LAG)
            }  # the last good rows, unchanged
            assert down[LAST_SUCCESS] == up[LAST_SUCCESS]
        reader.step()
        back = wait_scrape(port, lambda m: m[UP] == 1)
        assert back[f"{LAG}{{p-pipeline}}"] == 3 and f"{LAG}{{p-fm}}" not in back  # NEWER
        assert back[ERRORS] == 2 and back[LAST_SUCCESS] > up[LAST_SUCCESS]
    finally:
        for _ in range(3):
            reader.step()  # let a poll that is waiting return, so stop() joins at once
        exporter.stop()
    assert reader.closed
