"""Helpers of the Redis fault tests: marks in the ranker's read log, an in-process ranker
whose reads can be sliced by time, and a probe of the machine's wake-up lateness."""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schemas.codec import Codec
from schemas.records import ProposalBatch
from store.tiers import Tier
from streams.settings import REPO_ROOT, Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import (
    STATELESS_RANKING,
    FaultProcs,
    TimedReplay,
    fault_pipeline,
    wait_caught_up,
)
from tests.integration.live_harness import (
    env_for,
    live_settings,
    read_topic_with_partitions,
    written_once,
)
from tests.integration.redis_instance import RedisInstance

#: wall seconds the replay of the whole test traffic takes (about 10 requests per second)
REPLAY_WALL_S = 24.0


@dataclass(frozen=True)
class Mark:
    """What the in-process ranker had served at one instant (counters since it started)."""

    requests: int
    reads: int  #: latencies recorded so far
    served: int  #: lookups served by any tier other than missing
    exact: int  #: lookups served the exact pair
    missing: int
    failed_reads: int  #: reads that hit a timeout or a store error

    def _lookups_since(self, earlier: Mark) -> int:
        return max(1, self.served + self.missing - earlier.served - earlier.missing)

    def served_share_since(self, earlier: Mark) -> float:
        return (self.served - earlier.served) / self._lookups_since(earlier)

    def exact_share_since(self, earlier: Mark) -> float:
        return (self.exact - earlier.exact) / self._lookups_since(earlier)


class InProcessRanker:
    """The ranker service, built as ``solaris ranker`` builds it, on a thread of the test."""

    def __init__(self, settings: Settings, bundle: Path) -> None:
        from store.reader import FeatureReader
        from streams.engine.config import reader_config
        from streams.live.ranker_service import RankerOptions, RankerService
        from streams.models_loader import load_models
        from streams.stores import store_from_settings

        models, _ = load_models(settings, bundle)
        reader = FeatureReader(
            store_from_settings(settings),
            reader_config(settings, models.fm.dim, models.fm.model_version),
        )
        options = RankerOptions(f"{settings.topic_prefix}-ranker", write_scores=False)
        self.service = RankerService(
            settings, reader, models.solaris, models.items, options, models.vm
        )
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ranker", daemon=True)

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:  # reported by check(), not lost with the thread
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.service.stop()
        self._thread.join(timeout=30)

    def check(self) -> None:
        """Raise if the ranker crashed or skipped a message because its handling raised."""
        assert self.error is None, f"ranker crashed: {self.error!r}"
        assert self._thread.is_alive(), "ranker thread ended"
        assert self.service.failed == 0, f"{self.service.failed} messages failed in the ranker"
        assert self.service.reader.stats.internal_errors == 0, "reader internal errors"

    def mark(self) -> Mark:
        svc, st = self.service, self.service.reader.stats
        counts = svc.coverage.counts.copy()
        return Mark(
            svc.requests,
            len(svc.read_ms),
            int(counts.sum() - counts[Tier.MISSING]),
            int(counts[Tier.EXACT]),
            int(counts[Tier.MISSING]),
            st.timeouts + st.store_errors,
        )

    def read_ms_between(self, a: Mark, b: Mark) -> np.ndarray:
        """Latencies (ms) of the reads made between two marks (deque.copy is atomic)."""
        return np.asarray(list(self.service.read_ms.copy())[a.reads : b.reads], np.float64)


class WakeupProbe:
    """How late this process wakes from a ``deadline_ms`` sleep, sampled while it runs.

    On the loaded 2-core test machine a 20 ms sleep itself ends several ms late at p99
    (24.2 ms measured next to other jobs); a read that waits on a socket for its deadline cannot
    do better, so the deadline check allows for the lateness measured during the same fault.
    """

    def __init__(self, deadline_ms: float) -> None:
        self.deadline_s = deadline_ms / 1000.0
        self.late_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wakeup-probe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(self.deadline_s)
            self.late_ms.append((time.perf_counter() - t0 - self.deadline_s) * 1000.0)

    def __enter__(self) -> WakeupProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def p99(self) -> float:
        return float(np.percentile(self.late_ms, 99)) if self.late_ms else 0.0


#: the keyspace-notification channel of evicted keys, every database
EVICTED = "__keyevent@*__:evicted"


class EvictionLog:
    """Names of the keys Redis evicts while it runs (keyspace notifications, ``Ee``), so a
    value absent after a ``maxmemory`` run can be told evicted (named here) from lost.

    Read by a ``redis-cli`` process, not a thread of the test: the subscriber's unread output
    buffer counts against ``maxmemory`` (each eviction adds a notification to it), so a slow
    reader eats the cap's headroom. One run with a reader thread (next to the ranker's, at load
    6) evicted 1571 keys, 708 of 749 pairs, with 37 OOM write retries; with ``redis-cli``,
    394-526 keys and no retry in 4 runs at load 1-9 (523 with no reader at all)."""

    def __init__(self, rds: RedisInstance, out: Path) -> None:
        self._rds, self._out = rds, out
        self._proc: subprocess.Popen[bytes] | None = None
        self.keys: set[bytes] = set()

    def __enter__(self) -> EvictionLog:
        client = self._rds.client()
        client.config_set("notify-keyspace-events", "Ee")
        client.close()
        with self._out.open("wb") as out:
            self._proc = subprocess.Popen(
                ["redis-cli", "-p", str(self._rds.port), "--csv", "psubscribe", EVICTED],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while b'"psubscribe"' not in self._out.read_bytes():  # subscribed before any eviction
            assert time.monotonic() < deadline, "redis-cli did not subscribe"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        self._wait_for_every_notification()
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self.keys = {row[-1].encode() for row in self._rows()}

    def _rows(self) -> list[list[str]]:
        lines = self._out.read_text().splitlines()
        return list(csv.reader(line for line in lines if line.startswith('"pmessage"')))

    def _wait_for_every_notification(self, timeout_s: float = 10.0) -> None:
        """Until the log holds one line per eviction the server counted: notifications of the
        last evictions may still be on the socket, and Redis may go on evicting for a while
        from its timer after the last write (one run named 308 of 309 after a fixed 0.5 s)."""
        client = self._rds.client()
        deadline = time.monotonic() + timeout_s
        try:
            while len(self._rows()) < int(client.info("stats")["evicted_keys"]):
                if time.monotonic() > deadline:
                    break  # the caller's assertions say which keys went unnamed
                time.sleep(0.1)
        finally:
            client.close()


class MemorySampler:
    """The largest ``INFO memory`` figures Redis showed while it runs (a poll every
    ``every_s``): when a write under ``maxmemory`` gets OOM, they say whether the keys or the
    clients' buffers (which count against the cap and cannot be evicted) filled it. One reply
    per poll, read at once, so the sampler adds no buffer of its own."""

    FIELDS = ("used_memory", "used_memory_dataset", "mem_clients_normal", "mem_clients_slaves")
    #: from ``INFO clients``: which kind of client buffer grew, and how many clients there were
    CLIENT_FIELDS = (
        "connected_clients",
        "client_recent_max_input_buffer",
        "client_recent_max_output_buffer",
    )

    def __init__(self, rds: RedisInstance, every_s: float = 0.2) -> None:
        self._rds, self._every_s = rds, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peaks: dict[str, int] = dict.fromkeys(self.FIELDS + self.CLIENT_FIELDS, 0)
        self.polls = 0

    def _run(self) -> None:
        client = self._rds.client()
        try:
            while not self._stop.wait(self._every_s):
                info = {**client.info("memory"), **client.info("clients")}
                for field in self.peaks:
                    self.peaks[field] = max(self.peaks[field], int(info.get(field, 0)))
                self.polls += 1
        finally:
            client.close()

    def __enter__(self) -> MemorySampler:
        self._thread = threading.Thread(target=self._run, name="redis-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=10)


@contextmanager
def live_run(
    settings: Settings, bundle: Path, log_dir: Path
) -> Iterator[tuple[FaultProcs, InProcessRanker]]:
    """Pipeline + FM workers (processes) and the in-process ranker, all joined and assigned."""
    from streams.lag import wait_for_groups

    with fault_pipeline(settings, log_dir) as procs:
        ranker = InProcessRanker(settings, bundle)
        ranker.start()
        try:
            wait_for_groups(settings, [f"{settings.topic_prefix}-ranker"], timeout_s=120)
            yield procs, ranker
        finally:
            ranker.stop()


def start_replay(settings: Settings, traffic: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    """``solaris replay`` at the speed that plays ``traffic`` in REPLAY_WALL_S seconds."""
    speed = TimedReplay.speed_for(traffic, REPLAY_WALL_S)
    env = env_for(settings) | {"SOLARIS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    with (log_dir / "replay.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "replay", str(traffic), "--speed", f"{speed}"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def finish(replay: subprocess.Popen[bytes], settings: Settings, procs: FaultProcs) -> None:
    """Wait for the replay to end and the pipeline to commit everything it was sent."""
    assert replay.wait(timeout=180) == 0, "replay failed"
    wait_caught_up(settings, procs)
    procs.alive()


@dataclass(frozen=True)
class Verified:
    """One ``verified`` message: where it sits and the pairs it asks the FM for."""

    partition: int
    offset: int
    user_id: int
    event_time_ms: int
    item_ids: tuple[int, ...]


def verified_messages(settings: Settings) -> list[Verified]:
    """Every verified batch with its offset (the topic is not compacted: offset = index)."""
    codec = Codec()
    out, next_offset = [], dict.fromkeys(range(settings.topic_partitions), 0)
    for part, _, value in read_topic_with_partitions(settings, settings.topic("verified")):
        batch = codec.decode(value, ProposalBatch)
        out.append(
            Verified(
                part,
                next_offset[part],
                batch.user_id,
                batch.event_time_ms,
                tuple(batch.item_ids),
            )
        )
        next_offset[part] += 1
    return out


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """High-water mark of each partition of ``topic`` now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap, "group.id": "solaris-test-watermarks"}
    )
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(settings.topic_partitions)
        }
    finally:
        consumer.close()


def faulted_settings(bundle: Path, rds: RedisInstance) -> Settings:
    """A unique prefix on the shared broker, the store on ``rds``, the stateless verifier
    ranking (so the run can be compared with the simulator)."""
    base = Settings().model_copy(update={"store_url": rds.url})
    require_kafka_and_redis(base)
    return live_settings(base, uuid.uuid4().hex[:10], bundle, partitions=2, **STATELESS_RANKING)


def dense_traffic_file() -> Path:
    """240 requests of 18 users over 3 h of event time, spread evenly (no daily cycle): at
    REPLAY_WALL_S every second of the replay has requests in flight, so each fault window sees
    tens of them. Same world and item space as the tiny bundle's traffic, whose models serve it
    (``fault_harness.fault_traffic`` spans 2 days with nights, i.e. long idle stretches)."""
    from models.data.columns import iter_events
    from models.data.synthetic import SyntheticConfig, generate
    from models.data.traffic import write_traffic

    def write(tmp: Path) -> None:
        world = generate(
            SyntheticConfig(
                n_users=30,
                n_items=300,
                days=0.125,
                k=20,
                seed=7,
                sessions_per_day=16.0,
                diurnal_amplitude=0.0,
            )
        )
        write_traffic(tmp, iter_events(world.requests, world.impressions), {"dataset": "faults"})

    return written_once(Settings().cache_dir / "test-data" / "faults-redis-v1.avro", write)
