"""Time-based split of labelled impressions into the three periods of the no-leakage scheme.

Scheme (issue 3, item 6), as in production, where the FM is trained on the past and its
embeddings are computed on new traffic:

- **Period A** (oldest, default 60 % of impressions): the FM trains here, and only here.
  Its early-stopping slice is the last ``fm_valid_fraction`` of A.
- **Period B** (next 20 %): every VM variant trains here, on the *same* examples, with inputs
  from the fixed FM (embeddings, logits, soft labels) computed on B — traffic the FM never saw.
  The last ``vm_valid_fraction`` of B is the validation slice each VM is tuned on (grid over
  learning rate, weight decay, id dropout); the VM is then refit on all of B.
- **Period C** (newest 20 %): test. Nothing is tuned on it.

Histories are never split: an example's history is the user's impressions before its event
time, whatever period they fall in (the FM reads the past of the user, as it would online).
Boundaries are event times, so impressions sharing a timestamp never straddle two periods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class SplitError(ValueError):
    """The data cannot be split as asked (too few impressions, or bad fractions)."""


@dataclass(frozen=True)
class TimeSplit:
    """Index arrays (int64, into the impression arrays, ascending time) of each slice."""

    fm_train: np.ndarray
    fm_valid: np.ndarray
    vm_train: np.ndarray
    vm_valid: np.ndarray
    test: np.ndarray
    boundaries_ms: tuple[int, int, int, int]  # A-valid start, B start, B-valid start, C start

    @property
    def fm_all(self) -> np.ndarray:
        return np.concatenate([self.fm_train, self.fm_valid])

    @property
    def vm_all(self) -> np.ndarray:
        return np.concatenate([self.vm_train, self.vm_valid])


def _boundary(times_sorted: np.ndarray, q: float) -> int:
    k = min(max(round(q * times_sorted.shape[0]), 0), times_sorted.shape[0] - 1)
    return int(times_sorted[k])


def time_split(
    event_time_ms: np.ndarray,
    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    fm_valid_fraction: float = 0.1,
    vm_valid_fraction: float = 0.2,
) -> TimeSplit:
    """Split impressions by event time into FM (A), VM (B) and test (C) periods.

    ``fractions`` are shares of impressions (A, B, C) and must sum to 1.
    """
    if abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) <= 0:
        raise SplitError(f"fractions must be positive and sum to 1, got {fractions}")
    times = np.asarray(event_time_ms, dtype=np.int64)
    if times.shape[0] < 20:
        raise SplitError(f"need at least 20 impressions to split, got {times.shape[0]}")
    srt = np.sort(times)
    a, b, _ = fractions
    t_av = _boundary(srt, a * (1 - fm_valid_fraction))
    t_b = _boundary(srt, a)
    t_bv = _boundary(srt, a + b * (1 - vm_valid_fraction))
    t_c = _boundary(srt, a + b)
    idx = np.arange(times.shape[0], dtype=np.int64)
    parts = {
        "fm_train": idx[times < t_av],
        "fm_valid": idx[(times >= t_av) & (times < t_b)],
        "vm_train": idx[(times >= t_b) & (times < t_bv)],
        "vm_valid": idx[(times >= t_bv) & (times < t_c)],
        "test": idx[times >= t_c],
    }
    empty = [name for name, rows in parts.items() if rows.shape[0] == 0]
    if empty:
        raise SplitError(f"empty slices {empty}: timestamps too coarse or too few impressions")
    return TimeSplit(**parts, boundaries_ms=(t_av, t_b, t_bv, t_c))
