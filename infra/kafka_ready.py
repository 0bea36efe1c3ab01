#!/usr/bin/env python3
"""Wait until a Kafka broker answers requests (used by infra/kafka.sh).

With confluent_kafka importable: poll ``AdminClient.list_topics(timeout=2)``
until the cluster metadata lists at least one broker.

Without it: a stdlib-only check over a raw socket: an ApiVersions v0 request
and, when the broker supports it, a Metadata v4 request that must list at
least one broker.

Exit codes: 0 ready, 1 timed out, 2 the process given with --pid exited.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time

API_METADATA = 3
API_VERSIONS = 18
CLIENT_ID = b"solaris-kafka-ready"


class NotReady(Exception):
    pass


# --------------------------------------------------------------------------
# stdlib fallback: raw Kafka protocol (non-flexible versions only)
# --------------------------------------------------------------------------


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    """Send one request (request header v1) and return the response body."""
    header = struct.pack(">hhih", api_key, version, corr, len(CLIENT_ID)) + CLIENT_ID
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    if size < 4 or size > 64 * 1024 * 1024:
        raise NotReady(f"bad response size {size}")
    data = _recv_exact(sock, size)
    (resp_corr,) = struct.unpack_from(">i", data, 0)  # response header v0
    if resp_corr != corr:
        raise NotReady(f"correlation id {resp_corr} != {corr}")
    return data[4:]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise NotReady("connection closed by broker")
        buf += chunk
    return bytes(buf)


def _api_versions(sock: socket.socket) -> dict[int, tuple[int, int]]:
    body = _request(sock, API_VERSIONS, 0, 1, b"")
    error, count = struct.unpack_from(">hi", body, 0)
    # 35 = UNSUPPORTED_VERSION: the broker still answers with its version table.
    if error not in (0, 35) or count <= 0:
        raise NotReady(f"ApiVersions error={error} count={count}")
    versions = {}
    for i in range(count):
        key, vmin, vmax = struct.unpack_from(">hhh", body, 6 + 6 * i)
        versions[key] = (vmin, vmax)
    return versions


def _metadata_brokers(sock: socket.socket) -> int:
    # Metadata v4: topics = null (all), allow_auto_topic_creation = false
    body = _request(sock, API_METADATA, 4, 2, struct.pack(">ib", -1, 0))
    off = 4  # throttle_time_ms
    (n_brokers,) = struct.unpack_from(">i", body, off)
    return n_brokers


def check_raw(host: str, port: int, timeout: float) -> str:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        versions = _api_versions(sock)
        vmin, vmax = versions.get(API_METADATA, (1, -1))
        if vmin <= 4 <= vmax:
            n = _metadata_brokers(sock)
            if n <= 0:
                raise NotReady("metadata lists no broker")
            return f"{len(versions)} APIs, metadata lists {n} broker(s)"
        return f"{len(versions)} APIs (metadata v4 unsupported, ApiVersions only)"


# --------------------------------------------------------------------------
# confluent_kafka path
# --------------------------------------------------------------------------


def make_confluent_check(bootstrap: str):
    import logging

    from confluent_kafka import KafkaException  # noqa: F401  (import check)
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("solaris.kafka_ready.librdkafka")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": 2000,
            "reconnect.backoff.max.ms": 500,
            "logger": quiet,
        }
    )

    def check(_timeout: float) -> str:
        try:
            md = admin.list_topics(timeout=2)
        except Exception as exc:  # KafkaException on timeout / transport errors
            raise NotReady(str(exc)) from exc
        if not md.brokers:
            raise NotReady("metadata lists no broker")
        return (
            f"metadata: cluster {md.cluster_id}, {len(md.brokers)} broker(s), "
            f"{len(md.topics)} topic(s)"
        )

    return check


# --------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="host:port")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait in total")
    ap.add_argument("--pid", type=int, default=None, help="give up early if this process exits")
    ap.add_argument("--raw", action="store_true", help="force the stdlib socket check")
    ap.add_argument("--quiet", "-q", action="store_true")
    args = ap.parse_args(argv)

    host, _, port_s = args.bootstrap.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    port = int(port_s)

    method = "raw socket (stdlib)"
    check = None
    if not args.raw:
        try:
            check = make_confluent_check(args.bootstrap)
            method = "confluent_kafka AdminClient"
        except ImportError:
            check = None
    if check is None:

        def check(t: float) -> str:
            try:
                return check_raw(host, port, t)
            except (OSError, struct.error) as exc:
                raise NotReady(f"{type(exc).__name__}: {exc}") from exc

    deadline = time.monotonic() + args.timeout
    last = "no attempt"
    while True:
        if args.pid is not None and not pid_alive(args.pid):
            print(f"kafka_ready: process {args.pid} exited ({last})", file=sys.stderr)
            return 2
        try:
            info = check(2.0)
        except NotReady as exc:
            last = str(exc)
        else:
            if not args.quiet:
                print(f"kafka_ready: {args.bootstrap} ready via {method}: {info}")
            return 0
        if time.monotonic() >= deadline:
            print(
                f"kafka_ready: {args.bootstrap} not ready after {args.timeout:g}s"
                f" via {method}: {last}",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
