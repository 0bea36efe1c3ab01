"""Helpers for live-pipeline tests: a tiny trained bundle, small traffic, child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.config import TrainConfig
from models.data.columns import iter_events
from models.data.synthetic import SyntheticConfig, generate
from models.data.traffic import write_traffic
from streams.settings import REPO_ROOT, Settings

#: Small enough to train in seconds; the live tests check plumbing and parity, not model quality.
TINY_TRAIN = TrainConfig(
    seeds=1,
    history_len=8,
    embedding_dim=16,
    fm_item_dim=16,
    fm_hidden=32,
    fm_epochs=1,
    vm_id_dim=4,
    vm_hidden=(16,),
    vm_epochs=2,
    vm_lrs=(1e-2,),
    vm_weight_decays=(0.0,),
    vm_id_dropouts=(0.1,),
    lags_ms=(0, 600_000),
    serving_lag_ms=600_000,
    bootstrap_replicates=20,
    #: the fair VM: the live ranker reads each user's history from the store in its one round
    #: trip, so the parity tests check those features end to end
    vm_user_features=True,
)


#: sessions per user-day of test traffic: light users keep replays to tens of requests
LIGHT_USERS = 0.35


def small_traffic(path: Path, n_users: int = 12, days: float = 1.0, seed: int = 5) -> Path:
    """Deterministic small synthetic traffic (tens of requests)."""

    def write(tmp: Path) -> None:
        traffic = generate(
            SyntheticConfig(
                n_users=n_users,
                n_items=300,
                days=days,
                k=20,
                seed=seed,
                sessions_per_day=LIGHT_USERS,
            )
        )
        write_traffic(
            tmp, iter_events(traffic.requests, traffic.impressions), {"dataset": "synthetic-test"}
        )

    return written_once(path, write)


def written_once(path: Path, write: Callable[[Path], None]) -> Path:
    """``path``, written by ``write`` only when absent: to a temporary name beside it, then
    renamed, so test workers running at once (pytest-xdist) never read a half-written file."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            write(tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


#: the ranker's read deadline in parity runs (production default: 20 ms): a loaded CI machine
#: otherwise serves "missing" past 20 ms where the simulator (no deadline offline) reads the value
#: (seen: live exact coverage 0.5217 vs 0.5292 with an evaluation running beside the test)
PARITY_READ_DEADLINE_MS = 2_000.0


def live_settings(
    base: Settings, unique: str, bundle: Path, partitions: int = 4, **extra: Any
) -> Settings:
    """Settings of one live test: its own topic/key prefix, the tiny bundle's dims."""
    return base.model_copy(
        update={
            "topic_prefix": f"t{unique}",
            "key_prefix": f"t{unique}",
            "topic_partitions": partitions,
            "bundle_dir": bundle,
            "embedding_dim": TINY_TRAIN.embedding_dim,
            "history_len": TINY_TRAIN.history_len,
            "faust_commit_interval_s": 0.1,
            # a killed worker's partitions move after 10 s, not 45: the crash tests wait for it
            "consumer_session_timeout_s": 10.0,
            **extra,
        }
    )


def fresh_live_settings(bundle: Path, partitions: int = 2, **extra: Any) -> Settings:
    """:func:`live_settings` with a new unique prefix; skips (or fails under
    SOLARIS_REQUIRE_SERVICES) unless Kafka and Redis answer."""
    import uuid

    from tests.conftest import require_kafka_and_redis

    base = Settings()
    require_kafka_and_redis(base)
    return live_settings(base, uuid.uuid4().hex[:10], bundle, partitions, **extra)


def env_for(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SOLARIS_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        SOLARIS_STORE_BACKEND=settings.store_backend,
        SOLARIS_STORE_URL=settings.store_url,
        SOLARIS_REDIS_WAIT_REPLICAS=str(settings.redis_wait_replicas),
        SOLARIS_REDIS_WAIT_TIMEOUT_MS=str(settings.redis_wait_timeout_ms),
        SOLARIS_TOPIC_PREFIX=settings.topic_prefix,
        SOLARIS_KEY_PREFIX=settings.key_prefix,
        SOLARIS_TOPIC_PARTITIONS=str(settings.topic_partitions),
        SOLARIS_BUNDLE_DIR=str(settings.bundle_dir),
        SOLARIS_CACHE_DIR=str(settings.cache_dir),
        SOLARIS_EMBEDDING_DIM=str(settings.embedding_dim),
        SOLARIS_HISTORY_LEN=str(settings.history_len),
        SOLARIS_FAUST_COMMIT_INTERVAL_S=str(settings.faust_commit_interval_s),
        SOLARIS_CONSUMER_SESSION_TIMEOUT_S=str(settings.consumer_session_timeout_s),
        SOLARIS_NEIGHBOUR_INTERVAL_MS=str(settings.neighbour_interval_ms),
        SOLARIS_VERIFIER_RANK_BY=settings.verifier_rank_by,
        SOLARIS_AGENT_BATCH_ATTEMPTS=str(settings.agent_batch_attempts),
        SOLARIS_AGENT_BATCH_MAX_BACKOFF_S=str(settings.agent_batch_max_backoff_s),
        SOLARIS_PRODUCER_MESSAGE_TIMEOUT_MS=str(settings.producer_message_timeout_ms),
        SOLARIS_PAIR_IN_FLIGHT_TIMEOUT_MS=str(settings.pair_in_flight_timeout_ms),
        SOLARIS_REFRESH_AFTER_MS=str(settings.refresh_after_ms),
        SOLARIS_TABLE_SWEEP_INTERVAL_S=str(settings.table_sweep_interval_s),
        SOLARIS_NEIGHBOUR_AGGREGATE_TTL_MS=str(settings.neighbour_aggregate_ttl_ms),
        SOLARIS_TABLE_EXPIRY_GRACE_MS=str(settings.table_expiry_grace_ms),
        SOLARIS_FUSE_VERIFY=str(settings.fuse_verify).lower(),
        # the ranker's deadline: the parity runs give it PARITY_READ_DEADLINE_MS (before, the
        # ranker process never saw it and read with the default 20 ms, so a loaded machine
        # made it serve "missing" and fail parity)
        SOLARIS_READ_DEADLINE_MS=str(settings.read_deadline_ms),
        SOLARIS_VERIFIER_PAIR_MEMORY_MS=str(settings.verifier_pair_memory_ms),
        PYTHONPATH=str(REPO_ROOT),
        PYTHONUNBUFFERED="1",
    )
    if settings.verifier_top_fraction is not None:
        env["SOLARIS_VERIFIER_TOP_FRACTION"] = str(settings.verifier_top_fraction)
    return env


@dataclass
class Procs:
    settings: Settings
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "streams.cli", *args],
                cwd=REPO_ROOT,
                env=env_for(self.settings),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def kill9(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self, name: str, timeout_s: float = 30) -> None:
        """SIGTERM and wait (SIGKILL after ``timeout_s``): a graceful stop, so a worker leaves
        its consumer group at once instead of being dropped after the session timeout."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(
                    f"{name} died (rc {proc.returncode}):\n{self.log(name)[-4000:]}"
                )

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()


@contextmanager
def pipeline(settings: Settings, log_dir: Path, ranker: bool = True) -> Iterator[Procs]:
    """Pipeline worker + separate FM worker (+ ranker) for ``settings``; stopped on exit."""
    from streams.lag import wait_for_groups
    from streams.topics import create_topics

    create_topics(settings)
    procs = Procs(settings, log_dir)
    try:
        procs.start(
            "pipeline", "worker", "--agents", "history,speculate,verify,aggregate,neighbours"
        )
        procs.start("fm", "worker", "--agents", "embed")
        groups = [f"{settings.topic_prefix}-pipeline", f"{settings.topic_prefix}-fm"]
        if ranker:
            procs.start("ranker", "ranker")
            groups.append(f"{settings.topic_prefix}-ranker")
        try:
            wait_for_groups(settings, groups, timeout_s=120)
        except TimeoutError:
            procs.alive()
            raise
        yield procs
    finally:
        procs.stop_all()


def wait_drained(settings: Settings, procs: Procs, timeout_s: float = 180) -> None:
    from streams.lag import LagReader

    reader = LagReader(settings)
    topics = [
        settings.topic(t)
        for t in ("requests", "impressions", "speculated", "verified", "embeddings")
    ]
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            procs.alive()
            if reader.wait_drained(reader.groups(), topics, timeout_s=5):
                return
        raise AssertionError("pipeline did not drain")
    finally:
        reader.close()


def read_topic(
    settings: Settings, topic: str, timeout_s: float = 30.0
) -> list[tuple[bytes | None, bytes | None]]:
    """Every message of ``topic`` from the beginning (key, value); raises if the end of every
    partition is not reached within ``timeout_s`` (a partial read must not pass for "empty")."""
    return [(k, v) for _, k, v in read_topic_with_partitions(settings, topic, timeout_s)]


def read_topic_with_partitions(
    settings: Settings, topic: str, timeout_s: float = 30.0
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every message of ``topic`` from the beginning as (partition, key, value); raises on a
    partial read like :func:`read_topic`."""
    return [(m.partition, m.key, m.value) for m in read_topic_messages(settings, topic, timeout_s)]


@dataclass(frozen=True, slots=True)
class TopicMessage:
    """One message read back, with where it sits in the log (to tell a resent copy, far
    behind, from a copy written next to the first)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def attempt(self) -> int:
        """The try of its agent's batch that sent it (1 unless a retry sent it again)."""
        from streams.live.sends import ATTEMPT_HEADER

        found = [v for k, v in self.headers if k == ATTEMPT_HEADER and v is not None]
        return int(found[-1]) if found else 1


def read_topic_messages(
    settings: Settings, topic: str, timeout_s: float = 30.0
) -> list[TopicMessage]:
    """Every message of ``topic`` from the beginning, with its position; raises on a partial
    read like :func:`read_topic`."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": "solaris-test-reader",  # required by the client; never joins: assign()
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    parts = settings.topic_partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
    out: list[TopicMessage] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(eof) < parts:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(out)} messages of {topic}; partitions at end: {eof}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                continue
            out.append(
                TopicMessage(
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    tuple(msg.headers() or ()),
                )
            )
    finally:
        consumer.close()
    return out


def raw_encode(record: object) -> bytes:
    """Encode without field validation (to build invalid messages on purpose)."""
    import io
    import struct

    import fastavro

    from schemas.registry import parsed_schemas, wire_id_of

    wire_id = wire_id_of(type(record))
    buf = io.BytesIO()
    buf.write(struct.pack(">BI", 0, wire_id))
    fastavro.schemaless_writer(
        buf, parsed_schemas()[wire_id], {k: getattr(record, k) for k in record.__slots__}
    )
    return buf.getvalue()
