"""The reference sequential recommender: RecBole's SASRec, trained here on the FM's own split.

RecBole pins libraries the project cannot share (numpy < 2 among them), so it runs in its own
environment (``infra/reference-venv.sh``, cached) as a subprocess. The sequences are written as
a RecBole atomic file whose timestamp is each step's position in its user's sequence: RecBole's
leave-last-out split in time order then cuts exactly where :mod:`models.seqrec.sequences` cuts.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.seqrec.sequences import Sequences

log = logging.getLogger(__name__)
DRIVER = Path(__file__).with_name("recbole_driver.py")
#: the script that makes the reference environment (a checkout of the repository has it)
VENV_SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "reference-venv.sh"
MARK = "SOLARIS_REFERENCE "
DATASET = "solaris"


class ReferenceFailed(RuntimeError):
    """The reference environment could not be made, or its run failed (the output says why)."""


@dataclass(frozen=True)
class ReferenceConfig:
    max_len: int = 50  #: RecBole's SASRec default
    epochs: int = 300  #: RecBole's default; early stopping ends it
    patience: int = 10  #: RecBole's default ``stopping_step``
    seed: int = 0
    timeout_s: float = 4 * 3600


def write_atomic(seqs: Sequences, folder: Path) -> Path:
    """``folder/solaris/solaris.inter``: one row per step, the step's index as its time."""
    target = folder / DATASET / f"{DATASET}.inter"
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as fh:
        fh.write("user_id:token\titem_id:token\ttimestamp:float\n")
        for user, items in zip(seqs.users.tolist(), seqs.items, strict=True):
            for step, item in enumerate(items.tolist()):
                fh.write(f"{user}\t{item}\t{step}\n")
    return target


def reference_python() -> str:
    """The reference environment's interpreter (made on first use; minutes, then cached)."""
    done = subprocess.run(["bash", str(VENV_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReferenceFailed(f"infra/reference-venv.sh failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def parse_output(stdout: str) -> dict[str, Any]:
    """The driver's JSON line (the last one that starts with :data:`MARK`)."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        raise ReferenceFailed(f"no result line in the reference's output:\n{stdout[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    return result


def run_reference(seqs: Sequences, cfg: ReferenceConfig, threads: int = 2) -> dict[str, Any]:
    """Train and test the reference SASRec on ``seqs``' leave-last-out split."""
    python = reference_python()
    with tempfile.TemporaryDirectory(prefix="solaris-reference-") as tmp:
        write_atomic(seqs, Path(tmp))
        args = [str(a) for a in (tmp, DATASET, cfg.max_len, cfg.epochs, cfg.patience, cfg.seed)]
        log.info("training the reference SASRec (RecBole) on %d users", len(seqs))
        env = os.environ | {"SOLARIS_REFERENCE_THREADS": str(threads)}
        done = subprocess.run(
            [python, str(DRIVER), *args],
            capture_output=True,
            text=True,
            timeout=cfg.timeout_s,
            env=env,
            cwd=tmp,  # RecBole writes ./log and ./log_tensorboard
            check=False,
        )
    if done.returncode != 0:
        raise ReferenceFailed(
            f"the reference run failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return parse_output(done.stdout)
