"""A pid file is trusted only while its pid is still the named program's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.pid_files import checked_pid


def test_a_live_process_of_that_program_is_returned(tmp_path: Path) -> None:
    pid_file = tmp_path / "x.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    assert checked_pid(pid_file, "python") == os.getpid()


def test_a_reused_pid_is_refused(tmp_path: Path) -> None:
    """The pid now names another program (here: this test's own interpreter, as a test
    worker would be): refused, not signalled."""
    pid_file = tmp_path / "kafka.pid"
    pid_file.write_text(str(os.getpid()))
    with pytest.raises(RuntimeError, match=r"is not kafka\.Kafka any more"):
        checked_pid(pid_file, "kafka.Kafka")


def test_a_gone_process_is_a_lookup_error(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names nothing now (until reused)
    pid_file = tmp_path / "redis.pid"
    pid_file.write_text(str(child.pid))
    with pytest.raises(ProcessLookupError):
        checked_pid(pid_file, "redis-server")
