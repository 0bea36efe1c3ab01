"""bench.cpu: CPU time per process from /proc (issue 23: CPU µs per event next to events/s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.cpu import CpuMeter, cpu_seconds, pids_with

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")


def test_cpu_of_a_process_and_its_children_grows_with_work() -> None:
    before = cpu_seconds(os.getpid())
    assert before is not None
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    after = cpu_seconds(os.getpid())
    assert after is not None and after - before >= 0.2
    assert cpu_seconds(2**22 + 12345) is None  # no such process


def test_live_child_processes_count_and_are_found_by_command_line() -> None:
    marker = "solaris-cpu-test-marker"
    busy = f"import time; e=time.process_time()+3\nwhile time.process_time()<e: pass  # {marker}"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        # the child's command line appears once it has exec'd: poll (a loaded machine is slow)
        deadline = time.monotonic() + 5.0
        while child.pid not in pids_with(lambda cmd: marker in cmd):
            assert time.monotonic() < deadline, "child never found by its command line"
            time.sleep(0.02)
        mine = cpu_seconds(os.getpid(), with_children=False)
        before = cpu_seconds(os.getpid())
        time.sleep(1.0)  # this process sleeps; its child burns CPU
        after = cpu_seconds(os.getpid())
        assert before is not None and after is not None and mine is not None
        assert after - before >= 0.3, (before, after)
        assert (cpu_seconds(os.getpid(), with_children=False) or 0) - mine < 0.2
    finally:
        child.kill()
        child.wait(timeout=30)


def test_per_event_rates_leave_out_processes_not_found() -> None:
    assert CpuMeter({"gone": [2**22 + 12345]}).read() == {"gone": None}
    rates = CpuMeter.per_event_us({"me": 1.0, "gone": None}, {"me": 1.5, "gone": None}, 1000)
    assert rates == {"me": 500.0, "gone": None, "total": 500.0}
