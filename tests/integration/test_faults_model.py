"""Fault matrix: onnxruntime fails for 10 s in the FM worker during a timed replay (issue 24).

Every ``InferenceSession.run`` of the FM worker raises onnxruntime's own error while a fault
file exists (a ``sitecustomize`` hook, only in that worker: a GPU or runtime failure is not
the data's fault). The test creates the file once the pipeline is well into the replay and
removes it 10 s later.

Asserted: the failure is not treated as bad data: no dead letter at all; the FM worker stays
up, runs its batch again (``retrying the whole batch`` with ``ModelUnavailable`` in its log)
and reports not ready meanwhile (``/readyz`` 503 with ``batches_finishing`` false, 200 again
after); and after the replay nothing is lost (``check_nothing_lost``: every verified pair stored
with the FM's vector for its verified history, aggregates equal to the folded ones and to the
simulator's, the verified set the simulator's, none verified twice).

Before issue 24, each onnxruntime error became an ``InferenceError`` per message: every
message of the fault's batches went to the dead-letter topic and its pairs were never stored.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from streams.settings import Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import (
    STATELESS_RANKING,
    fault_pipeline,
    hook_env,
    pair_keys,
    print_measured,
    replay_until_pairs,
    wait_caught_up,
    wait_for,
)
from tests.integration.live_harness import live_settings, read_topic
from tests.integration.nothing_lost import check_nothing_lost
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULT_S = 10.0
#: pairs in Redis before the fault: the pipeline is well into the replay, not starting up
PAIRS_BEFORE_FAULT = 100
FAILED = "TEST-ORT-FAILED"
#: the FM worker's ``onnxruntime.InferenceSession.run`` raises onnxruntime's ``Fail`` while the
#: file ``TEST_ORT_FAULT_FILE`` exists, as a GPU that dropped out or a runtime fault would
ORT_FAULT_HOOK = f"""
import os
import onnxruntime as _ort
from onnxruntime.capi.onnxruntime_pybind11_state import Fail as _Fail

_FILE = os.environ["TEST_ORT_FAULT_FILE"]
_run = _ort.InferenceSession.run


def _faulty(self, *args, **kwargs):
    if os.path.exists(_FILE):
        print("{FAILED}", flush=True)
        raise _Fail("test fault: CUDA failure 999: unknown error (injected)")
    return _run(self, *args, **kwargs)


_ort.InferenceSession.run = _faulty
"""


def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    """Status and body of the FM worker's ``/readyz``; (0, {}) when it did not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except (urllib.error.URLError, OSError):
        return 0, {}


def test_onnxruntime_failing_for_10_s_is_retried_not_dead_lettered(
    traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    base = Settings()
    require_kafka_and_redis(base)
    # 0.5 + 1 + 2 + 4 + 8 s of backoff outlast the fault well inside 8 tries
    settings = live_settings(
        base, uuid.uuid4().hex[:10], bundle, agent_batch_attempts=8, **STATELESS_RANKING
    )
    fault = tmp_path / "ort-fault"
    fm_env = hook_env(tmp_path, "ort-hook", ORT_FAULT_HOOK, TEST_ORT_FAULT_FILE=str(fault))
    port = free_port()
    with fault_pipeline(settings, tmp_path, fm_env=fm_env, fm_web_port=port) as procs:
        wait_for("the FM worker to be ready", lambda: _readyz(port)[0] == 200, timeout_s=120)
        replay = replay_until_pairs(settings, traffic_faults, PAIRS_BEFORE_FAULT)
        at_fault, t_fault = pair_keys(settings), time.monotonic() - replay.started_at
        fault.touch()
        began = time.monotonic()
        not_ready: list[dict[str, Any]] = []
        while time.monotonic() - began < FAULT_S:
            procs.alive()
            status, body = _readyz(port)
            if status == 503:
                not_ready.append(body)
            time.sleep(0.1)
        during = pair_keys(settings) - at_fault
        fault.unlink()
        back_s = wait_for(
            "the FM worker to store pairs again",
            lambda: pair_keys(settings) > at_fault + during,
            timeout_s=90,
        )
        ready_s = wait_for("ready again", lambda: _readyz(port)[0] == 200, timeout_s=90)
        stats = replay.join()
        drain_s = wait_caught_up(settings, procs)
        procs.alive()
        log = procs.log("fm")
    dead_letters = read_topic(settings, settings.topic("dead-letter"))
    report = check_nothing_lost(settings, traffic_faults, bundle)
    print_measured(
        "onnxruntime fails for 10 s",
        {
            "requests": stats.requests,
            "pairs_at_fault": at_fault,
            "fault_at_s": t_fault,
            "pairs_stored_during_fault": during,
            "failed_runs": log.count(FAILED),
            "batch_retries": log.count("retrying the whole batch"),
            "not_ready_polls": len(not_ready),
            "stored_again_after_s": back_s,
            "ready_again_after_s": ready_s,
            "drain_after_replay_s": drain_s,
            "dead_letters": len(dead_letters),
            "verified_pairs": report.verified,
            "embedded_twice": report.embedding_duplicates,
        },
    )
    assert log.count(FAILED) > 0, "the fault never hit an FM call"
    assert "retrying the whole batch" in log and "ModelUnavailable" in log
    assert not_ready, "/readyz never said not ready during the fault"
    assert any("batches_finishing" in b["failing"] for b in not_ready), not_ready[:3]
    assert dead_letters == [], f"{len(dead_letters)} dead letters: a model fault is not bad data"
    report.assert_nothing_lost()
