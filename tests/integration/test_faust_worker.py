"""A real Faust worker process consumes a real topic, keeps a RocksDB table, writes to Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from streams.kafka_clients import make_producer
from streams.settings import REPO_ROOT, Settings
from streams.topics import create_topics

pytestmark = pytest.mark.integration


@pytest.fixture()
def worker(
    test_settings: Settings, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    create_topics(test_settings, names=("clicks",))
    env = dict(os.environ)
    env.update(
        SOLARIS_TOPIC_PREFIX=test_settings.topic_prefix,
        SOLARIS_KEY_PREFIX=test_settings.key_prefix,
        SOLARIS_TOPIC_PARTITIONS=str(test_settings.topic_partitions),
        SOLARIS_STATE_DIR=str(tmp_path / "state"),
        PYTHONPATH=str(REPO_ROOT),
    )
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faust",
            "-A",
            "tests.integration.faust_counter_app",
            "worker",
            "-l",
            "info",
            "--without-web",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


def test_worker_counts_into_table_and_redis(
    worker: subprocess.Popen[bytes], test_settings: Settings, redis_url: str, tmp_path: Path
) -> None:
    producer = make_producer(test_settings)
    expected = {"u1": 5, "u2": 3, "u3": 1}
    for user, n in expected.items():
        for i in range(n):
            producer.produce(
                test_settings.topic("clicks"), key=user.encode(), value=str(i).encode()
            )
    assert producer.flush(10) == 0

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = {u: f"{test_settings.key_prefix}:count:{u}" for u in expected}
    deadline = time.monotonic() + 90
    got: dict[str, int] = {}
    while time.monotonic() < deadline:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        got = {u: int(client.get(k) or 0) for u, k in keys.items()}
        if got == expected:
            break
        time.sleep(0.5)
    client.delete(*keys.values())
    client.close()
    assert got == expected, (tmp_path / "worker.log").read_text()[-3000:]
