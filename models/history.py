"""A user's recent labelled impressions as serving holds them (numpy only).

Kept apart from :mod:`models.runtime` so the engine (``streams.engine.history``) can use it
without loading onnxruntime (issue 23: layers one-way)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.errors import InputError


@dataclass(frozen=True)
class UserHistory:
    """A user's recent labelled impressions, oldest first (what the ``history`` agent keeps).

    ``items`` int64 [k], ``labels`` int8 [k] (1 = engaged), ``times_ms`` int64 [k]
    non-decreasing; k may exceed the FM's ``history_len`` (the runner keeps the last L before
    the event time).
    """

    items: np.ndarray
    labels: np.ndarray
    times_ms: np.ndarray

    def __post_init__(self) -> None:
        k = self.items.shape[0] if self.items.ndim == 1 else -1
        if k < 0 or self.labels.shape != (k,) or self.times_ms.shape != (k,):
            raise InputError(
                f"UserHistory arrays must be 1-D of one length, got {self.items.shape}, "
                f"{self.labels.shape}, {self.times_ms.shape}"
            )
        if k > 1 and bool(np.any(np.diff(self.times_ms) < 0)):
            raise InputError("UserHistory.times_ms must be non-decreasing (oldest first)")

    @classmethod
    def empty(cls) -> UserHistory:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.int64))

    @classmethod
    def of(
        cls, items: Sequence[int], labels: Sequence[int], times_ms: Sequence[int]
    ) -> UserHistory:
        return cls(
            np.asarray(items, dtype=np.int64),
            np.asarray(labels, dtype=np.int8),
            np.asarray(times_ms, dtype=np.int64),
        )
