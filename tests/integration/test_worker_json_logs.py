"""Issue 25: a worker asked for JSON logs (SOLARIS_LOG_JSON, as the k8s ConfigMap does) writes only
JSON lines, also after Faust has started (its worker replaced the root handlers with plain text),
its start-up banner included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.settings import REPO_ROOT
from tests.integration.live_harness import env_for, fresh_live_settings

pytestmark = pytest.mark.integration


def test_worker_logs_stay_json_after_faust_starts(bundle: Path, tmp_path: Path) -> None:
    from streams.lag import wait_for_groups
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    log = tmp_path / "fm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--agents", "embed"],
            cwd=REPO_ROOT,
            env={**env_for(settings), "SOLARIS_LOG_JSON": "true"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_groups(settings, [f"{settings.topic_prefix}-fm"], timeout_s=120)
        time.sleep(2.0)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
    text = log.read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # every line, not only Faust's own "[date] [pid] [LEVEL]" ones: also the worker's banner,
    # Faust's " OK ^" / spinner text, warnings and tracebacks (issue 25 item 8)
    plain = [ln for ln in lines if not _is_json_object(ln)]
    assert not plain, f"{len(plain)} of {len(lines)} lines are not JSON, e.g. {plain[:3]}"
    records = [json.loads(ln) for ln in lines]
    assert any(str(r.get("logger", "")).startswith(("faust", "mode")) for r in records), text[
        -2000:
    ]
    assert any(r.get("event") == "models loaded" for r in records)
    assert any(str(r.get("event", "")).startswith("worker ") and "roles" in r for r in records)


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
