"""Run the local infra scripts (``infra/kafka.sh``, ``infra/redis.sh``) with settings applied."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from streams.errors import InfraError
from streams.settings import REPO_ROOT, Settings

INFRA_DIR = REPO_ROOT / "infra"
SERVICES = ("kafka", "redis")


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    name: str
    healthy: bool
    detail: str


def script_env(settings: Settings) -> dict[str, str]:
    """Environment for the scripts: ports derived from the configured URLs, same cache dir."""
    kafka_port = settings.kafka_bootstrap.split(",")[0].rsplit(":", 1)[-1]
    redis_port = urlparse(settings.store_url).port or 6379
    env = dict(os.environ)
    env.update(
        SOLARIS_KAFKA_PORT=kafka_port,
        SOLARIS_KAFKA_CONTROLLER_PORT=str(int(kafka_port) + 1),
        SOLARIS_REDIS_PORT=str(redis_port),
        SOLARIS_CACHE_DIR=str(settings.cache_dir),
        SOLARIS_PYTHON=sys.executable,
    )
    return env


def run_script(
    service: str, action: str, settings: Settings, capture: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``infra/<service>.sh <action>``; output goes to the terminal unless ``capture``."""
    if service not in SERVICES:
        raise InfraError(f"unknown service {service!r}; known: {', '.join(SERVICES)}")
    script: Path = INFRA_DIR / f"{service}.sh"
    if not script.exists():
        raise InfraError(f"{script} not found (is this a full clone of the repo?)")
    return subprocess.run(
        ["bash", str(script), action],
        env=script_env(settings),
        text=True,
        capture_output=capture,
        check=False,
    )


def status(service: str, settings: Settings) -> ServiceStatus:
    """Health of one service, from its script's ``status`` (exit 0 = healthy)."""
    proc = run_script(service, "status", settings, capture=True)
    detail = (proc.stdout + proc.stderr).strip().splitlines()
    return ServiceStatus(service, proc.returncode == 0, detail[-1] if detail else "")
