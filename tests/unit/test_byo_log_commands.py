"""Bring your own log, end to end: ``solaris evaluate`` and ``solaris simulate`` succeed on a
small interaction log the test writes (CSV with its own column names and 0/1 labels).

No services: both commands run in-process models on the converted traffic. ``evaluate`` trains
the bundle (default config, seconds on this log) and ``simulate`` must reuse it from the model
cache, then replay the converted traffic through the engine and report coverage by tier.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streams.settings import REPO_ROOT

pytestmark = pytest.mark.slow

T0 = 1_600_000_000  # seconds
USERS, ITEMS, SESSIONS, PER_SESSION = 20, 120, 10, 3
#: sessions at least 10 min apart, their interactions 10 s apart: one request per session at the
#: converter's 60 s session gap
SESSION_GAP_S = (600, 3 * 3600)
COLUMNS = "user=uid,item=sku,time=ts,label=clicked"
RUN_TIMEOUT_S = 600


def write_log(path: Path) -> int:
    """A seeded log: each user prefers a quarter of the items (label 1), else clicks 1 in 10.
    Returns the number of sessions (= requests after conversion)."""
    rng = random.Random(7)
    rows = ["uid,sku,ts,clicked"]
    for user in range(USERS):
        t = T0 + rng.randrange(3600)
        for _ in range(SESSIONS):
            t += rng.randrange(*SESSION_GAP_S)
            for j in range(PER_SESSION):
                item = rng.randrange(ITEMS)
                label = int(item % 4 == user % 4 or rng.random() < 0.1)
                rows.append(f"u{user},{item},{t + 10 * j},{label}")
    path.write_text("\n".join(rows) + "\n")
    return USERS * SESSIONS


def solaris(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``solaris <args>`` in a child process; fails the test with its output unless it exits 0."""
    run = subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert run.returncode == 0, (
        f"solaris {args[0]} exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    )
    return run


@pytest.fixture(scope="module")
def byo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The log, an environment whose caches are private to this module, and evaluate's run."""
    base = tmp_path_factory.mktemp("byo-log")
    log = base / "interactions.csv"
    sessions = write_log(log)
    env = {
        **os.environ,
        "SOLARIS_CACHE_DIR": str(base / "cache"),
        "SOLARIS_MODEL_DIR": str(base / "models"),
        "PYTHONPATH": str(REPO_ROOT),
        "COLUMNS": "100",
    }
    env.pop("SOLARIS_BUNDLE_DIR", None)  # simulate must find the bundle trained on the log
    report = base / "evaluate.json"
    args = ["--dataset", "log", "--data-dir", str(log), "--columns", COLUMNS]
    run = solaris(env, "evaluate", *args, "--json", str(report))
    return {
        "base": base,
        "args": args,
        "sessions": sessions,
        "env": env,
        "evaluate": run,
        "evaluation": json.loads(report.read_text()),
    }


def test_evaluate_trains_and_scores_the_log(byo: dict[str, Any]) -> None:
    evaluation = byo["evaluation"]
    assert evaluation["dataset"] == "log"
    split = evaluation["split"]
    assert split["fm_train"] > 0 and split["vm_train"] > 0 and split["test"] > 0
    # the label column was read: both classes in the test period (all 1 = labels ignored)
    assert 0.0 < split["test_base_rate"] < 1.0
    for model in ("fm", "vm", "vm_solaris"):
        ne = evaluation["models"][model]["ne"]
        assert math.isfinite(ne) and 0.5 < ne < 2.0, (model, ne)
    # the tier mix the serving engine achieved, per seed (empty when not engine-built)
    for mix in evaluation["engine_coverage"]:
        assert not mix or sum(mix.values()) == pytest.approx(1.0)
    bundles = sorted((byo["base"] / "models").glob("bundle-*"))
    assert len(bundles) == 1 and f"bundle {bundles[0]}" in " ".join(byo["evaluate"].stdout.split())


def test_simulate_replays_the_log_with_its_bundle(byo: dict[str, Any]) -> None:
    out = byo["base"] / "simulate.json"
    run = solaris(byo["env"], "simulate", *byo["args"], "--no-random", "--json", str(out))
    report = json.loads(out.read_text())
    assert report["dataset"] == "log"
    assert Path(report["traffic"]).parent == byo["base"] / "cache" / "traffic"
    # evaluate's bundle, not a second training: same log, same config, same cache key
    assert sorted((byo["base"] / "models").glob("bundle-*")) == [Path(report["bundle"])]
    assert report["requests"] == byo["sessions"]
    assert report["lookups"] >= report["requests"]
    coverage = report["coverage"]
    assert set(coverage) == {
        "exact",
        "aggregate",
        "neighbour_item",
        "neighbour_aggregate",
        "state",
        "missing",
    }
    assert sum(coverage.values()) == pytest.approx(1.0, abs=1e-9)
    assert report["cumulative"]["exact"] == pytest.approx(coverage["exact"])
    assert 0.0 < coverage["exact"] < report["cumulative"]["with_neighbours"] <= 1.0
    assert report["fm_pairs"] > 0 and report["reader"]["timeouts"] == 0
    assert 0 < report["labelled"]["lookups"] < report["lookups"]
    assert "report written to" in run.stdout


def test_converted_traffic_is_the_same_file_in_every_process(tmp_path: Path) -> None:
    """The same log converted by processes with different hash seeds gives the same bytes
    (it did not: fastavro ordered a field's properties by set iteration; see traffic_schema)."""
    log = tmp_path / "interactions.csv"
    write_log(log)
    files = []
    for seed in ("0", "1", "2", "3"):
        out = tmp_path / f"traffic-{seed}.avro"
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)}
        solaris(env, "data", "traffic", "--dataset", "log", "--data-dir", str(log), "--columns",
                COLUMNS, "--out", str(out))  # fmt: skip
        files.append(out.read_bytes())
    assert all(f == files[0] for f in files[1:])
