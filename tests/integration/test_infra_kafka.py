"""``infra/kafka.sh`` data-dir hygiene and ``infra/with-services.sh``'s own broker, on spare ports.

Why: the test runs left their topics in the broker's data dir; after ~13k partitions the broker
loaded them longer than the start timeout and CI failed before any test ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from streams.settings import REPO_ROOT
from tests.ports import free_port

pytestmark = pytest.mark.integration

KAFKA_SH = REPO_ROOT / "infra" / "kafka.sh"
WITH_SERVICES = REPO_ROOT / "infra" / "with-services.sh"


def _env(port: int, controller_port: int, **extra: str) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if k != "SOLARIS_KAFKA_DATA_DIR"}
    return inherited | {
        "SOLARIS_KAFKA_PORT": str(port),
        "SOLARIS_KAFKA_CONTROLLER_PORT": str(controller_port),
        "SOLARIS_KAFKA_HEAP": "512m",
        "SOLARIS_PYTHON": sys.executable,
        **extra,
    }


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


def _topics(port: int) -> set[str]:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    return {t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")}


def _create_topic(port: int, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(timeout=30)


@pytest.fixture()
def ports(kafka_bootstrap: str) -> tuple[int, int]:
    """Spare ports (the fixture only checks that the jars' broker can run here at all)."""
    return free_port(), free_port()


def test_a_fresh_start_drops_the_topics_and_a_crowded_data_dir_is_warned_about(
    tmp_path: Path, ports: tuple[int, int]
) -> None:
    port, cport = ports
    env = _env(port, cport, SOLARIS_KAFKA_DATA_DIR=str(tmp_path / "kafka"))
    try:
        _run(["bash", str(KAFKA_SH), "start"], env)
        _create_topic(port, "kept-between-starts")
        _run(["bash", str(KAFKA_SH), "stop"], env)

        again = _run(["bash", str(KAFKA_SH), "start"], env | {"SOLARIS_KAFKA_WARN_PARTITIONS": "2"})
        assert "holds 3 partitions" in again.stdout, again.stdout
        assert "kept-between-starts" in _topics(port)
        _run(["bash", str(KAFKA_SH), "stop"], env)

        fresh = _run(["bash", str(KAFKA_SH), "start"], env | {"SOLARIS_KAFKA_FRESH": "1"})
        assert "fresh start" in fresh.stdout, fresh.stdout
        assert _topics(port) == set()
    finally:
        subprocess.run(["bash", str(KAFKA_SH), "stop"], env=env, capture_output=True, timeout=120)


def test_with_services_runs_its_own_broker_on_an_emptied_data_dir_and_deletes_it(
    tmp_path: Path, ports: tuple[int, int]
) -> None:
    port, cport = ports
    data_dir = tmp_path / "services-kafka"
    env = _env(port, cport, SOLARIS_SERVICES_KAFKA_DATA_DIR=str(data_dir))
    # A broker left on that data dir by an earlier run, with its topic, stopped.
    leftover_env = env | {"SOLARIS_KAFKA_DATA_DIR": str(data_dir)}
    try:
        _run(["bash", str(KAFKA_SH), "start"], leftover_env)
        _create_topic(port, "left-by-an-earlier-run")
        _run(["bash", str(KAFKA_SH), "stop"], leftover_env)
    finally:
        subprocess.run(
            ["bash", str(KAFKA_SH), "stop"], env=leftover_env, capture_output=True, timeout=120
        )
    assert (data_dir / "kraft-logs").is_dir()

    probe = (
        "from confluent_kafka.admin import AdminClient;"
        f"a = AdminClient({{'bootstrap.servers': '127.0.0.1:{port}'}});"
        "print('TOPICS', sorted(t for t in a.list_topics(timeout=10).topics"
        " if not t.startswith('__')))"
    )
    done = _run(["bash", str(WITH_SERVICES), sys.executable, "-c", probe], env)
    assert "TOPICS []" in done.stdout, done.stdout
    assert not data_dir.exists(), "with-services left its broker's data dir behind"


def _up(script: str, env: dict[str, str]) -> bool:
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / script), "status"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0


def test_overlapping_runs_share_the_services_and_the_last_one_stops_them(
    tmp_path: Path, ports: tuple[int, int]
) -> None:
    """A run begun while another one's services are up reuses them; the first run's end
    must not stop them under the second (a `make demo` beside a `make test` lost its broker
    that way); the second, the last user, stops them and deletes the broker's data dir."""
    port, cport = ports
    data_dir = tmp_path / "services-kafka"
    env = _env(
        port,
        cport,
        SOLARIS_SERVICES_KAFKA_DATA_DIR=str(data_dir),
        SOLARIS_REDIS_PORT=str(free_port()),
        SOLARIS_REDIS_DATA_DIR=str(tmp_path / "redis"),
    )
    kafka_env = env | {"SOLARIS_KAFKA_DATA_DIR": str(data_dir)}  # how kafka.sh finds that broker
    gate = tmp_path / "first-may-end"
    first = subprocess.Popen(
        ["bash", str(WITH_SERVICES), "bash", "-c", f"until [ -e {gate} ]; do sleep 0.1; done"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    second: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 180
        while not (_up("kafka.sh", kafka_env) and _up("redis.sh", env)):
            assert first.poll() is None, first.communicate()[0]
            assert time.monotonic() < deadline, "the first run's services did not come up"
            time.sleep(0.5)
        # the second run lets the first one end, waits until the test saw it end, then uses
        # both services
        ended = tmp_path / "first-ended"
        probe = tmp_path / "probe.py"
        probe.write_text(
            "import pathlib, time\n"
            "import redis\n"
            "from confluent_kafka.admin import AdminClient\n"
            f"pathlib.Path({str(gate)!r}).touch()\n"
            "start = time.monotonic()\n"
            f"while not pathlib.Path({str(ended)!r}).exists():\n"
            "    assert time.monotonic() - start < 120, 'the first run did not end'\n"
            "    time.sleep(0.1)\n"
            f"AdminClient({{'bootstrap.servers': '127.0.0.1:{port}'}}).list_topics(timeout=10)\n"
            f"assert redis.Redis(port={env['SOLARIS_REDIS_PORT']}).ping()\n"
            "print('BOTH UP AFTER THE FIRST RUN ENDED')\n"
        )
        second = subprocess.Popen(
            ["bash", str(WITH_SERVICES), sys.executable, str(probe)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        first_out = first.communicate(timeout=150)[0]
        ended.touch()
        second_out = second.communicate(timeout=150)[0]
        assert first.returncode == 0, first_out
        assert second.returncode == 0, second_out
        assert "other runs still use it" in first_out, first_out
        assert "reusing it" in second_out, second_out
        assert "BOTH UP AFTER THE FIRST RUN ENDED" in second_out, second_out
        assert not _up("kafka.sh", kafka_env), "the last run left the broker running"
        assert not _up("redis.sh", env), "the last run left Redis running"
        assert not data_dir.exists(), "the last run left the broker's data dir behind"
    finally:
        gate.touch()
        for run in (first, second):
            if run is not None and run.poll() is None:
                run.kill()
        subprocess.run(["bash", str(KAFKA_SH), "stop"], env=kafka_env, capture_output=True)
        subprocess.run(
            ["bash", str(REPO_ROOT / "infra" / "redis.sh"), "stop"], env=env, capture_output=True
        )
