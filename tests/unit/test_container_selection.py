"""Which test services the integration suite uses (``SOLARIS_TEST_INFRA``): pure selection logic,
with the Docker probe and the package check passed in."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from streams.settings import unknown_variables
from tests.integration.containers import CONTAINERS, ENV, LOCAL, InfraChoice, choose, docker_ping


def _docker_down() -> None:
    raise ConnectionError("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")


def _must_not_probe() -> None:
    raise AssertionError("Docker probed although containers were not asked for")


@pytest.mark.parametrize("value", [None, "", "local", " LOCAL "])
def test_local_is_the_default_and_never_probes_docker(value: str | None) -> None:
    environ = {} if value is None else {ENV: value}
    assert choose(environ, ping=_must_not_probe) == InfraChoice(LOCAL)


def test_containers_with_docker_run() -> None:
    choice = choose({ENV: "containers"}, ping=lambda: None, has_testcontainers=lambda: True)
    assert choice == InfraChoice(CONTAINERS, None)


def test_containers_without_a_docker_daemon_skip_with_the_reason() -> None:
    choice = choose({ENV: "Containers"}, ping=_docker_down, has_testcontainers=lambda: True)
    assert choice.mode == CONTAINERS
    assert choice.skip_reason is not None
    assert "no Docker daemon" in choice.skip_reason and "docker.sock" in choice.skip_reason


def test_containers_without_the_package_skip_before_probing() -> None:
    choice = choose({ENV: "containers"}, ping=_must_not_probe, has_testcontainers=lambda: False)
    assert choice.skip_reason is not None and "testcontainers" in choice.skip_reason


def test_a_misspelt_value_is_an_error() -> None:
    with pytest.raises(ValueError, match="contianers"):
        choose({ENV: "contianers"}, ping=_must_not_probe)


def test_the_variable_is_accepted_by_the_settings_check() -> None:
    assert unknown_variables({ENV: "containers"}) == []


def test_docker_probe_needs_a_daemon_answer(tmp_path: Path) -> None:
    missing = f"unix://{tmp_path / 'no-docker.sock'}"
    with pytest.raises(OSError):
        docker_ping({"DOCKER_HOST": missing})
    with pytest.raises(ConnectionError, match="ssh://"):
        docker_ping({"DOCKER_HOST": "ssh://somewhere"})
    path = tmp_path / "d.sock"  # a stand-in daemon that answers /_ping like dockerd
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)

        def answer(reply: bytes) -> threading.Thread:
            def serve() -> None:
                conn, _ = server.accept()
                with conn:
                    conn.recv(256)
                    conn.sendall(reply)

            t = threading.Thread(target=serve)
            t.start()
            return t

        t = answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
        docker_ping({"DOCKER_HOST": f"unix://{path}"})
        t.join(5)
        t = answer(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
        with pytest.raises(ConnectionError, match="500"):
            docker_ping({"DOCKER_HOST": f"unix://{path}"})
        t.join(5)
