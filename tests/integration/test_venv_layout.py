"""``infra/venv.sh``: every clone runs its own code on the shared, cached dependencies.

Why: the cached venv used to hold the editable install of whichever clone ran ``make setup``
last, so a CI clone silently re-pointed a developer's ``.venv`` at the CI clone's code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from streams.settings import REPO_ROOT

pytestmark = pytest.mark.integration


def _origin(python: Path, module: str) -> str:
    """Where ``python`` imports ``module`` from (run from / : the current folder comes first)."""
    done = subprocess.run(
        [str(python), "-c", f"import {module}; print({module}.__file__)"],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_a_second_clone_gets_its_own_code_and_leaves_this_one_alone(tmp_path: Path) -> None:
    here = REPO_ROOT / ".venv" / "bin" / "python"
    if not here.exists():
        pytest.skip("no .venv in this clone (run `make setup`)")
    other = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(other)], check=True, timeout=120)
    done = subprocess.run(
        ["bash", str(other / "infra" / "venv.sh")], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr

    theirs = other / ".venv" / "bin" / "python"
    assert _origin(theirs, "streams").startswith(str(other)), "the clone runs another clone's code"
    assert _origin(here, "streams").startswith(str(REPO_ROOT)), "setup of a clone re-pointed ours"
    # the dependencies are the shared ones, and the CLI entry point is the clone's own
    assert not _origin(theirs, "numpy").startswith(str(other)), "dependencies installed per clone"
    cli = subprocess.run(
        [str(other / ".venv" / "bin" / "solaris"), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr


def test_setup_keeps_other_venvs_in_use_and_drops_long_unused_ones() -> None:
    """Issue 25: setup deleted every other ``venv-*`` in the cache, so a CPU and a GPU venv (or
    two branches' locks) on one host rebuilt each other's several GB in turn."""
    import os
    import shutil
    import time

    from streams.settings import Settings

    if not (REPO_ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this clone (run `make setup`)")
    cache = Settings().cache_dir
    in_use, unused = cache / "venv-test-in-use", cache / "venv-test-unused"
    foreign = cache / "venv-test-not-ours"  # no .complete: not built by infra/venv.sh
    try:
        for venv in (in_use, unused, foreign):
            venv.mkdir(parents=True, exist_ok=True)
            (venv / ".last-used").touch()
        for venv in (in_use, unused):
            (venv / ".complete").touch()
        month_ago = time.time() - 30 * 86_400
        for venv in (unused, foreign):
            os.utime(venv / ".last-used", (month_ago, month_ago))
        done = subprocess.run(
            ["bash", str(REPO_ROOT / "infra" / "venv.sh")],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "SOLARIS_CACHE_DIR": str(cache)},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert in_use.is_dir(), "a venv used yesterday was removed"
        assert not unused.exists(), "a venv unused for a month was kept"
        assert foreign.is_dir(), "setup deleted a folder it did not create"
    finally:
        for venv in (in_use, unused, foreign):
            shutil.rmtree(venv, ignore_errors=True)


def test_setup_refuses_a_dot_venv_it_did_not_make(tmp_path: Path) -> None:
    """A clone whose ./.venv is someone else's (no marker, no link to the shared venv) is left
    alone: setup exits with a message instead of deleting or installing into it."""
    other = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(other)], check=True, timeout=120)
    theirs = other / ".venv"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    done = subprocess.run(
        ["bash", str(other / "infra" / "venv.sh")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not made by infra/venv.sh" in done.stderr
    assert (theirs / "notes.txt").read_text() == "mine" and len(list(theirs.iterdir())) == 1
