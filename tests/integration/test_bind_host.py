"""Metrics endpoints listen on loopback unless configured (SOLARIS_BIND_HOST)."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.integration.live_harness import TINY_TRAIN, Procs

pytestmark = pytest.mark.integration


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses listening on ``port`` (from /proc/net/tcp: no traffic sent)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        host_hex, port_hex = local.split(":")
        if state == "0A" and int(port_hex, 16) == port:  # 0A = LISTEN
            out.add(socket.inet_ntoa(bytes.fromhex(host_hex)[::-1]))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ranker_metrics_bind_loopback_by_default(bundle: Path, tmp_path: Path) -> None:
    from streams.topics import create_topics
    from tests.conftest import require_kafka_and_redis

    base = Settings()
    require_kafka_and_redis(base)
    unique = uuid.uuid4().hex[:10]
    settings = base.model_copy(
        update={
            "topic_prefix": f"t{unique}",
            "key_prefix": f"t{unique}",
            "bundle_dir": bundle,
            "embedding_dim": TINY_TRAIN.embedding_dim,
            "history_len": TINY_TRAIN.history_len,
        }
    )
    create_topics(settings)
    port = free_port()
    procs = Procs(settings, tmp_path)
    try:
        procs.start("ranker", "ranker", "--metrics-port", str(port))
        deadline = time.monotonic() + 60
        while not listening_addresses(port) and time.monotonic() < deadline:
            procs.alive()
            time.sleep(0.2)
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        procs.stop_all()
