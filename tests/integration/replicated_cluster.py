"""A Redis Cluster of 3 masters + 3 replicas of a test's own (``infra/redis.sh cluster-start``
with ``SOLARIS_REDIS_CLUSTER_REPLICAS=1`` on free ports, ``cluster-node-timeout`` 5 s, its own
directory; stopped at the end), and what the failover tests do with it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from streams.settings import REPO_ROOT, Settings
from tests.integration.pid_files import checked_pid

#: cluster-node-timeout of the test clusters: a master unreachable this long is failed over
NODE_TIMEOUT_MS = 5_000


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(n: int = 6) -> list[int]:
    """``SOLARIS_REDIS_FAILOVER_PORTS``, else ``n`` free ports in 7100-7999 whose cluster bus
    port (+10000) is free too."""
    given = os.environ.get("SOLARIS_REDIS_FAILOVER_PORTS")
    if given:
        return [int(p) for p in given.split()]
    found = [p for p in range(7100, 8000) if _free(p) and _free(p + 10_000)][:n]
    assert len(found) == n, "no free ports for the failover cluster in 7100-7999"
    return found


def _script(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "redis.sh"), command],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=os.environ | env,
    )


@dataclass
class Cluster:
    ports: list[int]
    directory: Path
    #: the environment ``infra/redis.sh`` runs with for this cluster
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)

    def pid(self, port: int) -> int:
        """The node's pid, checked to be a redis-server's (see ``tests.integration.pid_files``)."""
        return checked_pid(self.directory / str(port) / "redis.pid", "redis-server")

    def restart_stopped(self) -> None:
        """Start the nodes that are down (a killed master rejoins as a replica of the promoted
        one: its nodes.conf is kept) and wait until every replica is in sync again."""
        run = _script("cluster-start", self.env)
        assert run.returncode == 0, f"cluster-start failed:\n{run.stdout}\n{run.stderr}"

    def replica_and_survivor(self, master: int) -> tuple[int, int]:
        """The replica of the master on port ``master``, and a node that is neither."""
        view = self.nodes(master)
        replica = next(p for p, (_, _, of) in view.items() if of == view[master][0])
        return replica, next(p for p in self.ports if p not in (master, replica))

    def nodes(self, via: int) -> dict[int, tuple[str, str, str]]:
        """``CLUSTER NODES`` seen from ``via``: port -> (id, flags, master id)."""
        client = self.node(via)
        try:
            text = client.execute_command("CLUSTER", "NODES")
        finally:
            client.close()
        text = text.decode() if isinstance(text, bytes) else str(text)
        out = {}
        for line in text.splitlines():
            f = line.split()
            out[int(f[1].split("@")[0].rsplit(":", 1)[1])] = (f[0], f[2], f[3])
        return out


@contextmanager
def replicated_cluster(directory: Path) -> Iterator[Cluster]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        msg = "redis-server / redis-cli not installed (infra/redis.sh cluster-start installs them)"
        if Settings().require_services:
            pytest.fail(msg)
        pytest.skip(msg)
    ports = cluster_ports()
    env = {
        "SOLARIS_REDIS_CLUSTER_PORTS": " ".join(map(str, ports)),
        "SOLARIS_REDIS_CLUSTER_DIR": str(directory),
        "SOLARIS_REDIS_CLUSTER_REPLICAS": "1",
        "SOLARIS_REDIS_CLUSTER_NODE_TIMEOUT_MS": str(NODE_TIMEOUT_MS),
    }
    cluster = Cluster(ports, directory, env)
    try:
        run = _script("cluster-start", env)
        assert run.returncode == 0, f"cluster-start failed:\n{run.stdout}\n{run.stderr}"
        status = _script("cluster-status", env)
        assert status.returncode == 0 and status.stdout.count("replica of") == 3, status.stdout
        yield cluster
    finally:
        _script("cluster-stop", env)


def wait_replicated(cluster: Cluster) -> None:
    """Until every master's replica has acknowledged the master's whole replication stream."""
    deadline = time.monotonic() + 10
    for port in cluster.ports:
        client = cluster.node(port)
        try:
            while True:
                info = client.info("replication")
                if info["role"] != "master":
                    break
                offsets = [v["offset"] for k, v in info.items() if k.startswith("slave")]
                if offsets and min(offsets) >= info["master_repl_offset"]:
                    break
                assert time.monotonic() < deadline, f"replica of {port} not in sync: {info}"
                time.sleep(0.05)
        finally:
            client.close()


def wait_promoted(cluster: Cluster, victim: int, replica: int, via: int) -> float:
    """Monotonic time at which ``via`` sees ``replica`` as a master and ``victim`` failed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        nodes = cluster.nodes(via)
        if "master" in nodes[replica][1] and "fail" in nodes[victim][1]:
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"replica {replica} not promoted: {cluster.nodes(via)}")
