"""SOLARIS clients against a real broker whose only listener is SASL_SSL (infra/kafka_sasl.sh).

The broker is our own (own ports, own temp data dir with a keytool-made CA), started once for
the module and stopped at the end; the shared dev broker is never touched. Asserted: admin,
producer, consumer and lag work with the credentials from ``Settings``, for every SASL mechanism
we support; the real pipeline worker (``solaris worker --agents all``) runs with them and embeds
the replayed traffic; a client without credentials, with a wrong password or without the CA is
refused, within a bounded time.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from models.data.traffic import read_traffic
from schemas.codec import Codec
from schemas.limits import Limits
from schemas.records import EmbeddingBatch, PairEmbedding, ProposalBatch
from store.keys import KeyLayout
from store.values import decode_vector, encode_pair
from streams.engine.embedder import Embedder
from streams.engine.steps.embed import embed_input
from streams.kafka_clients import client_config, make_consumer, make_producer
from streams.lag import LagReader
from streams.models_loader import load_models
from streams.replay import replay_events
from streams.settings import REPO_ROOT, Settings
from streams.topic_reader import read_topic
from streams.topics import create_topics
from tests.integration.live_harness import Procs, live_settings
from tests.integration.proc_cmdlines import CommandLines
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPT = REPO_ROOT / "infra" / "kafka_sasl.sh"
REFUSAL_BOUND_S = 10.0  # a refused client must learn it within this (measured: < 0.5 s)
#: worker vs in-process FM, in float16 steps of the value: batching may change the FM's last
#: float32 bits, which can flip a float16 rounding (measured: 0, bit-equal)
MAX_STEPS = 1.0
_QUIET = logging.getLogger("tests.kafka_sasl.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _unavailable(reason: str) -> None:
    if Settings().require_services:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def sasl_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Start a SASL_SSL broker; yield the SOLARIS_* client settings it wrote; stop it."""
    for tool in ("java", "keytool"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} not found: the SASL_SSL broker needs a JDK")
    data_dir = tmp_path_factory.mktemp("kafka-sasl")
    env = dict(
        os.environ,
        SOLARIS_KAFKA_PORT=str(free_port()),
        SOLARIS_KAFKA_CONTROLLER_PORT=str(free_port()),
        SOLARIS_KAFKA_DATA_DIR=str(data_dir),
        SOLARIS_KAFKA_HEAP="384m",
    )
    t0 = time.monotonic()
    with CommandLines() as seen:
        start = subprocess.run(
            [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300
        )
    _SEEN_COMMAND_LINES[:] = seen.lines
    try:
        if start.returncode != 0:
            if "no Kafka jars" in start.stderr:
                _unavailable(start.stderr.strip())
            pytest.fail(f"kafka_sasl.sh start failed:\n{start.stdout}\n{start.stderr}")
        print(f"SASL_SSL broker ready in {time.monotonic() - t0:.1f} s")
        lines = (data_dir / "credentials.env").read_text().splitlines()
        yield dict(line.split("=", 1) for line in lines if "=" in line)
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


#: every process command line seen while the module's broker started
_SEEN_COMMAND_LINES: list[str] = []


def test_no_password_is_ever_on_a_command_line(sasl_env: dict[str, str]) -> None:
    """Formatting the storage, starting the broker and adding the SCRAM users take seconds of
    JVM each; none of them may carry a password in its arguments (``ps`` shows them to every
    local user). The secrets file holds every password the script made."""
    secrets_file = Path(sasl_env["SOLARIS_KAFKA_SSL_CAFILE"]).parent.parent / "secrets"
    secrets = [
        line.split("=", 1)[1] for line in secrets_file.read_text().splitlines() if "=" in line
    ]
    assert len(secrets) == 3 and all(len(s) >= 16 for s in secrets)
    java = [line for line in _SEEN_COMMAND_LINES if "kafka." in line]
    assert any("kafka.Kafka" in line for line in java)  # the poller saw the JVMs at all
    leaked = [line[:120] for line in _SEEN_COMMAND_LINES if any(s in line for s in secrets)]
    assert not leaked, f"passwords on a command line: {leaked}"


def _settings(sasl_env: dict[str, str], **overrides: Any) -> Settings:
    fields = {k.removeprefix("SOLARIS_").lower(): v for k, v in sasl_env.items()}
    fields.update(topic_prefix=f"sasl-{uuid.uuid4().hex[:8]}", topic_partitions=2)
    fields.update(overrides)
    return Settings(**fields)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_admin_producer_consumer_and_lag_with_credentials(
    sasl_env: dict[str, str], mechanism: str
) -> None:
    settings = _settings(sasl_env, kafka_sasl_mechanism=mechanism)
    created = create_topics(settings, names=("clicks",))
    assert [r.created for r in created] == [True]
    topic = settings.topic("clicks")
    producer = make_producer(settings)
    sent = {f"u{i}".encode(): f"v{i}".encode() for i in range(20)}
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    assert {m.key: m.value for m in read_topic(settings, topic, timeout_s=60)} == sent

    group = f"{settings.topic_prefix}-group"
    consumer = make_consumer(settings, group, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == len(sent)
    reader = LagReader(settings)
    try:
        lags = reader.lag([group], [topic])
    finally:
        reader.close()
    assert sum(p.lag for p in lags) == 0 and sum(p.end for p in lags) == len(sent)


def _first_error(config: dict[str, Any]) -> tuple[float, KafkaError]:
    """Seconds until the client reports its first error, and that error."""
    errors: list[tuple[float, KafkaError]] = []
    t0 = time.monotonic()
    admin = AdminClient(
        {
            **config,
            "logger": _QUIET,
            "error_cb": lambda e: errors.append((time.monotonic() - t0, e)),
        }
    )
    while not errors and time.monotonic() - t0 < REFUSAL_BOUND_S:
        admin.poll(0.1)
    assert errors, f"no error within {REFUSAL_BOUND_S} s: the client was not refused"
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)  # and it never gets metadata
    return errors[0]


@pytest.mark.parametrize(
    ("case", "overrides", "expected", "says"),
    [
        (
            "no credentials",
            {"kafka_security_protocol": "PLAINTEXT"},
            {KafkaError._ALL_BROKERS_DOWN},
            "",
        ),
        (
            "wrong password",
            {"kafka_sasl_password": "not-the-password"},
            {KafkaError._AUTHENTICATION},
            "",
        ),
        (
            "wrong PLAIN password",
            {"kafka_sasl_mechanism": "PLAIN", "kafka_sasl_password": "nope"},
            {KafkaError._AUTHENTICATION},
            "",
        ),
        # librdkafka reports a failed certificate check as _SSL or, depending on when the
        # handshake fails, as _TRANSPORT (seen once in CI): what matters is the reason.
        (
            "unknown CA",
            {"kafka_ssl_cafile": None},
            {KafkaError._SSL, KafkaError._TRANSPORT},
            "certificate verify failed",
        ),
    ],
)
def test_client_without_valid_credentials_is_refused(
    sasl_env: dict[str, str], case: str, overrides: dict[str, Any], expected: set[int], says: str
) -> None:
    fields = dict(overrides)
    if fields.get("kafka_security_protocol") == "PLAINTEXT":
        fields.update(kafka_sasl_username="", kafka_sasl_password="", kafka_ssl_cafile=None)
    config = client_config(_settings(sasl_env, **fields))
    elapsed, error = _first_error(config)
    print(f"{case}: refused after {elapsed:.2f} s ({error.name()}: {error.str()[:80]})")
    assert error.code() in expected, error.str()
    assert says in error.str()


def test_pipeline_worker_with_credentials(
    sasl_env: dict[str, str],
    bundle: Path,
    traffic: Path,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real ``solaris worker --agents all`` (every agent, its tables and changelogs, its
    librdkafka sends) against the SASL_SSL broker, credentials only as ``SOLARIS_*`` env: the
    traffic replayed by the project's producer comes out as embeddings whose values are the
    FM's on the verified messages, in Kafka and in Redis."""
    settings = live_settings(_settings(sasl_env), uuid.uuid4().hex[:10], bundle, partitions=1)
    state = tmp_path / "state"
    for key, value in {**sasl_env, "SOLARIS_STATE_DIR": str(state)}.items():
        monkeypatch.setenv(key, value)  # the worker's env (Procs copies os.environ)
    group = f"{settings.topic_prefix}-pipeline"
    create_topics(settings)
    procs = Procs(settings, tmp_path)
    t0 = time.monotonic()
    try:
        procs.start("worker", "worker", "--agents", "all")
        # the worker reads from the earliest offset: no need to wait for it to join first
        replayed = replay_events(settings, read_traffic(traffic))  # make_producer's producer
        _wait_drained(settings, procs, group)
        print(
            f"{replayed.messages} events; worker started and drained in {time.monotonic() - t0:.1f} s"
        )
        verified, embedded = _outputs(settings)
    finally:
        procs.stop_all()
    log = procs.log("worker")
    assert "Crashed" not in log and "Traceback" not in log, log[-3000:]
    assert settings.kafka_sasl_password.get_secret_value() not in log
    assert (state / group).is_dir()  # Faust's data under SOLARIS_STATE_DIR ...
    assert not list(REPO_ROOT.glob(f"{settings.topic_prefix}*"))  # ... not in the cwd
    _check_values(settings, bundle, verified, embedded)


def _wait_drained(settings: Settings, procs: Procs, group: str, timeout_s: float = 120) -> None:
    """Until ``group`` has committed every message of the topics it reads (twice in a row).

    Read with a plain consumer of the group that never joins it (OffsetFetch + watermarks), not
    with the admin client's group describe: a describe that times out on this loaded machine can
    abort the process in librdkafka 2.16 (``rd_kafka_enq_once_del_source_return: Assertion
    eonce->refcnt > 0``, confluentinc/librdkafka#4605; seen twice here)."""
    names = ("requests", "impressions", "speculated", "verified", "embeddings")
    parts = [
        TopicPartition(settings.topic(n), p)
        for n in names
        for p in range(settings.topic_partitions)
    ]
    probe = make_consumer(settings, group, {"enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    zeros = 0
    try:
        while zeros < 2:
            procs.alive()
            assert time.monotonic() < deadline, (
                f"not drained in {timeout_s} s:\n{procs.log('worker')}"
            )
            committed = probe.committed(parts, timeout=10)
            ends = [probe.get_watermark_offsets(tp, timeout=10)[1] for tp in parts]
            lag = sum(end - max(c.offset, 0) for c, end in zip(committed, ends, strict=True))
            zeros = zeros + 1 if lag == 0 else 0
            time.sleep(0.5)
    finally:
        probe.close()


def _outputs(settings: Settings) -> tuple[dict[str, ProposalBatch], dict[str, EmbeddingBatch]]:
    """The ``verified`` and ``embeddings`` messages by request id (read with credentials)."""
    codec = Codec(Limits(max_candidates=settings.max_candidates))
    out: list[dict[str, Any]] = []
    for name, kind in (("verified", ProposalBatch), ("embeddings", EmbeddingBatch)):
        records = [codec.decode(m.value, kind) for m in read_topic(settings, settings.topic(name))]
        by_id = {r.request_id: r for r in records}
        assert len(by_id) == len(records), f"duplicate request ids on {name}"
        out.append(by_id)
    return out[0], out[1]


def _check_values(
    settings: Settings,
    bundle: Path,
    verified: dict[str, ProposalBatch],
    embedded: dict[str, EmbeddingBatch],
) -> None:
    """Each embeddings message is the FM (loaded here from the same bundle) on its verified
    message's pairs and history; Redis holds each pair's newest vector."""
    assert len(verified) >= 10, f"only {len(verified)} verified messages"
    assert embedded.keys() == verified.keys()
    models, _ = load_models(settings, bundle)
    batches = list(verified.values())
    expected = Embedder(models.fm).embed_messages(
        batches, [embed_input(None, b).history for b in batches]
    )
    newest: dict[tuple[int, int], PairEmbedding] = {}
    rows = iter(expected)
    worst = 0.0
    for b in batches:
        e = embedded[b.request_id]
        assert (e.user_id, e.event_time_ms, e.item_ids) == (b.user_id, b.event_time_ms, b.item_ids)
        assert e.model_version == models.fm.model_version
        mine = [next(rows) for _ in b.item_ids]
        worst = max(worst, _steps(e.arrays(), np.stack([_array(p) for p in mine])))
        for p in mine:
            old = newest.get((p.user_id, p.item_id))
            if old is None or p.event_time_ms >= old.event_time_ms:
                newest[(p.user_id, p.item_id)] = p
    stored_worst = _check_redis(settings, newest)
    print(
        f"{len(expected)} pairs; worker - here: topic {worst} float16 steps, Redis {stored_worst}"
    )
    assert worst <= MAX_STEPS and stored_worst <= MAX_STEPS


def _array(pair: PairEmbedding) -> np.ndarray:
    return decode_vector(encode_pair(pair)).array()


def _steps(got: np.ndarray, want: np.ndarray) -> float:
    """The largest |got - want| in float16 steps (spacing) of ``want``."""
    step = np.spacing(np.abs(want).astype(np.float16)).astype(np.float32)
    return float(np.max(np.abs(got - want) / step))


def _check_redis(settings: Settings, newest: dict[tuple[int, int], PairEmbedding]) -> float:
    """Every pair's stored value has the newest event time and model; the worst difference of
    the vectors in float16 steps."""
    layout = KeyLayout(settings.key_prefix)
    keys = [layout.pair(u, i) for u, i in newest]
    client = redis.Redis.from_url(settings.store_url)
    try:
        values = client.mget(keys)
    finally:
        client.close()
    worst = 0.0
    for pair, raw in zip(newest.values(), values, strict=True):
        assert raw is not None, f"pair ({pair.user_id}, {pair.item_id}) not stored"
        got, want = decode_vector(raw), decode_vector(encode_pair(pair))
        assert (got.event_time_ms, got.version_tag) == (want.event_time_ms, want.version_tag)
        worst = max(worst, _steps(got.array(), want.array()))
    return worst
