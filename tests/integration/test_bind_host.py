"""Metrics endpoints listen on loopback unless configured (SOLARIS_BIND_HOST)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.integration.live_harness import Procs, fresh_live_settings
from tests.ports import free_port

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


def test_ranker_metrics_bind_loopback_by_default(bundle: Path, tmp_path: Path) -> None:
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
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
