"""``infra/schema_registry.sh``: a Confluent-compatible schema registry (Apicurio Registry's
``ccompat`` API) started from Maven Central without Docker, on a spare port and data dir.

Only plain HTTP (urllib) talks to it here: what is checked is the registry the script runs, not
the project's code. Skips with the reason when java or mvn are missing, fails instead under
``SOLARIS_REQUIRE_SERVICES``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from streams.settings import REPO_ROOT, Settings
from tests.ports import free_port

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "infra" / "schema_registry.sh"
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _schema(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "Probe", "namespace": "t", "fields": list(fields)})


def _call(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=CT)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _script(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), cmd], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture()
def registry_env(tmp_path: Path) -> dict[str, str]:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        msg = f"the schema registry needs {', '.join(missing)}, not found here"
        if Settings().require_services:
            pytest.fail(msg)
        pytest.skip(msg)
    return dict(os.environ) | {
        "SOLARIS_SCHEMA_REGISTRY_PORT": str(free_port()),
        "SOLARIS_SCHEMA_REGISTRY_DATA_DIR": str(tmp_path / "registry"),
        "SOLARIS_PYTHON": sys.executable,
    }


def test_registry_serves_the_confluent_api_keeps_ids_across_a_restart_and_refuses_incompatible(
    registry_env: dict[str, str],
) -> None:
    try:
        started = _script("start", registry_env)
        assert started.returncode == 0, f"start failed:\n{started.stdout}\n{started.stderr}"
        url = _script("url", registry_env).stdout.strip()
        assert _call(f"{url}/config") == (200, {"compatibilityLevel": "BACKWARD"})

        v1 = _schema({"name": "a", "type": "long"})
        status, reg = _call(f"{url}/subjects/probe-value/versions", "POST", {"schema": v1})
        assert status == 200, reg
        v1_id = reg["id"]
        # a new field without a default breaks BACKWARD: refused, the subject named
        bad = _schema({"name": "a", "type": "long"}, {"name": "b", "type": "int"})
        status, refused = _call(f"{url}/subjects/probe-value/versions", "POST", {"schema": bad})
        assert status == 409 and "probe-value" in refused["message"], refused
        status, check = _call(
            f"{url}/compatibility/subjects/probe-value/versions/latest", "POST", {"schema": bad}
        )
        assert (status, check["is_compatible"]) == (200, False)
        good = _schema({"name": "a", "type": "long"}, {"name": "b", "type": "int", "default": 0})
        status, reg2 = _call(f"{url}/subjects/probe-value/versions", "POST", {"schema": good})
        assert status == 200 and reg2["id"] != v1_id, reg2

        restarted = _script("stop", registry_env).returncode, _script("start", registry_env)
        assert restarted[0] == 0 and restarted[1].returncode == 0, restarted[1].stderr
        # the H2 file database kept both versions and their ids
        assert _call(f"{url}/subjects/probe-value/versions") == (200, [1, 2])
        status, by_id = _call(f"{url}/schemas/ids/{v1_id}")
        assert status == 200 and json.loads(by_id["schema"]) == json.loads(v1)
        assert _script("status", registry_env).returncode == 0
    finally:
        _script("stop", registry_env)
    assert _script("status", registry_env).returncode == 3
