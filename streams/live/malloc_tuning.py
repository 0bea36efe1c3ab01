"""Give freed heap memory back to the OS in long-running workers (glibc only).

``solaris bench memory --lifetimes short`` (every table value expiring and swept, so the live
state stops growing before half time) still saw the pipeline worker's resident set climb in
steps: +16 MiB in one second at 62 % of the replay, flat before and after (end / half 1.103).
With glibc's mmap and trim thresholds fixed at 64 KiB (environment variables, nothing else
changed) the same run gave 1.019: the steps were freed memory glibc kept, not live data. Its
default thresholds grow with the largest block freed (up to 32 MiB), so after a burst of large
transient arrays (a neighbour rebuild, a batch of table values) later frees stay in the heap.

:func:`release_freed_memory` sets both thresholds with ``mallopt`` at worker start, so blocks of
at least that size are mapped on their own and returned when freed, and the heap top is trimmed
past it. Elsewhere (musl, macOS) it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

#: glibc's ``mallopt`` parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") else None


def release_freed_memory(threshold_kib: int, libc: ctypes.CDLL | None = None) -> bool:
    """Set glibc's mmap and trim thresholds to ``threshold_kib`` KiB; True when both took.
    ``threshold_kib`` 0 leaves the allocator's defaults (returns False)."""
    if threshold_kib <= 0:
        return False
    libc = libc if libc is not None else _libc()
    if libc is None:
        log.info("no glibc mallopt here: allocator thresholds left as they are")
        return False
    size = threshold_kib * 1024
    ok = all(libc.mallopt(param, size) == 1 for param in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD))
    log.info(
        "malloc thresholds set" if ok else "mallopt refused the thresholds",
        extra={"op": "malloc_thresholds", "threshold_kib": threshold_kib, "applied": ok},
    )
    return ok
