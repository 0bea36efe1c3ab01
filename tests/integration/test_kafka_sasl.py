"""SOLARIS clients against a real broker whose only listener is SASL_SSL (infra/kafka_sasl.sh).

The broker is our own (own ports, own temp data dir with a keytool-made CA), started once for
the module and stopped at the end; the shared dev broker is never touched. Asserted: admin,
producer, consumer, lag and a Faust worker work with the credentials from ``Settings``, for
every SASL mechanism we support; a client without credentials, with a wrong password or without
the CA is refused, within a bounded time.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streams.kafka_clients import client_config, make_consumer, make_producer
from streams.lag import LagReader
from streams.settings import REPO_ROOT, Settings
from streams.topic_reader import read_topic
from streams.topics import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPT = REPO_ROOT / "infra" / "kafka_sasl.sh"
APP = "tests.integration.faust_sasl_app"
REFUSAL_BOUND_S = 10.0  # a refused client must learn it within this (measured: < 0.5 s)
_QUIET = logging.getLogger("tests.kafka_sasl.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        SOLARIS_KAFKA_PORT=str(_free_port()),
        SOLARIS_KAFKA_CONTROLLER_PORT=str(_free_port()),
        SOLARIS_KAFKA_DATA_DIR=str(data_dir),
        SOLARIS_KAFKA_HEAP="384m",
    )
    t0 = time.monotonic()
    start = subprocess.run(
        [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300
    )
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


def test_faust_worker_with_credentials(sasl_env: dict[str, str], tmp_path: Path) -> None:
    settings = _settings(sasl_env, topic_partitions=1)
    create_topics(settings, names=("in", "out"))
    env = dict(os.environ, **sasl_env)
    env.update(
        SOLARIS_TOPIC_PREFIX=settings.topic_prefix,
        SOLARIS_TOPIC_PARTITIONS="1",
        SOLARIS_STATE_DIR=str(tmp_path / "state"),
        PYTHONPATH=str(REPO_ROOT),
    )
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "faust", "-A", APP, "worker", "-l", "info", "--without-web"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            echoed = _echo_round_trip(settings, worker, log_path)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    assert sorted(echoed) == [(b"u1", b"A:1"), (b"u1", b"C:2"), (b"u2", b"B:1")]
    assert settings.kafka_sasl_password.get_secret_value() not in log_path.read_text()


def _echo_round_trip(
    settings: Settings, worker: subprocess.Popen[bytes], log_path: Path
) -> list[tuple[bytes, bytes]]:
    """Send three messages through the worker; the echoes it wrote (key, value)."""
    producer = make_producer(settings)
    for key, value in ((b"u1", b"a"), (b"u2", b"b"), (b"u1", b"c")):
        producer.produce(settings.topic("in"), key=key, value=value)
    assert producer.flush(30) == 0
    consumer = make_consumer(
        settings, f"{settings.topic_prefix}-check", {"auto.offset.reset": "earliest"}
    )
    consumer.subscribe([settings.topic("out")])
    echoed: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 180
    try:
        while len(echoed) < 3 and time.monotonic() < deadline:
            assert worker.poll() is None, log_path.read_text()[-3000:]
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                echoed.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    assert len(echoed) == 3, log_path.read_text()[-3000:]
    return echoed
