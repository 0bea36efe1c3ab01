"""Workers hand freed heap memory back to the OS (glibc mallopt thresholds)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from streams.live.malloc_tuning import (
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    _libc,
    release_freed_memory,
)


class RecordingLibc:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


def test_both_thresholds_are_set_in_bytes() -> None:
    libc = RecordingLibc()
    assert release_freed_memory(64, libc)  # type: ignore[arg-type]
    assert libc.calls == [(M_MMAP_THRESHOLD, 65_536), (M_TRIM_THRESHOLD, 65_536)]


def test_zero_leaves_the_allocator_alone_and_a_refusal_is_reported() -> None:
    libc = RecordingLibc()
    assert not release_freed_memory(0, libc)  # type: ignore[arg-type]
    assert libc.calls == []
    assert not release_freed_memory(64, RecordingLibc(answer=0))  # type: ignore[arg-type]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_this_glibc_takes_the_thresholds() -> None:
    libc = _libc()
    assert isinstance(libc, ctypes.CDLL)
    assert release_freed_memory(64, libc)
