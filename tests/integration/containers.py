"""Opt-in test services in Docker: ``SOLARIS_TEST_INFRA=containers``.

The default (unset or ``local``) is the services our ``infra/`` scripts start on 127.0.0.1.
With ``containers``, the integration session starts Kafka (KRaft), Redis and an Aerospike server
with the ``testcontainers`` package and points ``SOLARIS_KAFKA_BOOTSTRAP``, ``SOLARIS_STORE_URL``
and ``SOLARIS_AEROSPIKE_HOSTS`` at them, so the whole integration suite (the Aerospike store
contract included, which otherwise skips without a server) runs on any host with Docker. Without
a Docker daemon or the package, those tests skip with that reason.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

ENV = "SOLARIS_TEST_INFRA"
LOCAL = "local"
CONTAINERS = "containers"

#: images of the opt-in services (pulled on first use; not exercised on a host without Docker)
KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.0"  # testcontainers' Kafka module drives this image
REDIS_IMAGE = "redis:7.4"
AEROSPIKE_IMAGE = "aerospike/aerospike-server"  # Community Edition; namespace "test" by default
AEROSPIKE_READY = "soon there will be cake"  # the server's "service ready" log line
START_TIMEOUT_S = 120


@dataclass(frozen=True, slots=True)
class InfraChoice:
    """Which services the integration tests use, and why they must skip (``None`` = they run)."""

    mode: str
    skip_reason: str | None = None


def infra_mode(environ: Mapping[str, str]) -> str:
    """``local`` (default) or ``containers``; anything else is a typo and an error."""
    value = environ.get(ENV, "").strip().lower() or LOCAL
    if value not in (LOCAL, CONTAINERS):
        raise ValueError(f"{ENV}={value!r}: expected {LOCAL!r} or {CONTAINERS!r}")
    return value


def docker_ping(environ: Mapping[str, str] = os.environ) -> None:
    """Raise unless a Docker daemon answers ``GET /_ping`` (the CLI alone is not enough).

    A raw socket rather than the docker SDK: the SDK leaves its socket open when the daemon is
    absent, which our warnings-as-errors turn into a test error.
    """
    host = environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        address: str | tuple[str, int] = host.removeprefix("unix://")
    elif host.startswith("tcp://"):
        name, port = host.removeprefix("tcp://").rsplit(":", 1)
        sock, address = socket.socket(socket.AF_INET, socket.SOCK_STREAM), (name, int(port))
        sock.settimeout(5)
    else:
        raise ConnectionError(f"DOCKER_HOST={host!r} is not unix:// or tcp://")
    with sock:
        sock.connect(address)
        sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        status = sock.recv(256).split(b"\r\n", 1)[0]
    if b" 200 " not in status + b" ":
        raise ConnectionError(f"Docker at {host} answered {status!r}")


def choose(
    environ: Mapping[str, str],
    ping: Callable[[], object] = docker_ping,
    has_testcontainers: Callable[[], bool] | None = None,
) -> InfraChoice:
    """Decide from the environment, the package and the daemon; Docker is probed only when
    containers were asked for."""
    mode = infra_mode(environ)
    if mode == LOCAL:
        return InfraChoice(LOCAL)
    if not (has_testcontainers or _has_testcontainers)():
        return InfraChoice(mode, f"{ENV}=containers: the testcontainers package is not installed")
    try:
        ping()
    except OSError as exc:  # ConnectionError, FileNotFoundError (no socket), timeouts
        return InfraChoice(mode, f"{ENV}=containers: no Docker daemon reachable ({exc})")
    return InfraChoice(mode)


def _has_testcontainers() -> bool:
    try:
        import testcontainers.core.container  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def started_services() -> Iterator[dict[str, str]]:
    """Start Kafka, Redis and Aerospike; yield the ``SOLARIS_*`` variables that point at them;
    stop and remove all three on exit (also when one of them fails to start)."""
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.community.redis import RedisContainer
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    with ExitStack() as stack:
        kafka = KafkaContainer(KAFKA_IMAGE).with_kraft()
        stack.callback(kafka.stop)
        kafka.start(timeout=START_TIMEOUT_S)
        redis = stack.enter_context(RedisContainer(REDIS_IMAGE))
        aerospike = stack.enter_context(
            DockerContainer(AEROSPIKE_IMAGE)
            .with_exposed_ports(3000)
            .waiting_for(
                LogMessageWaitStrategy(AEROSPIKE_READY).with_startup_timeout(START_TIMEOUT_S)
            )
        )
        yield {
            "SOLARIS_KAFKA_BOOTSTRAP": kafka.get_bootstrap_server(),
            "SOLARIS_STORE_URL": (
                f"redis://{redis.get_container_host_ip()}:{redis.get_exposed_port(6379)}/0"
            ),
            "SOLARIS_AEROSPIKE_HOSTS": (
                f"{aerospike.get_container_host_ip()}:{aerospike.get_exposed_port(3000)}"
            ),
        }
