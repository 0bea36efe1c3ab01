"""Models for the reference runs: an FM that costs nothing (coverage does not depend on the
vectors' values) and a random verifier (the "random selection at equal budget" baseline)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from streams.engine.history import UserHistory


class NullFM:
    """Zero embeddings: for oracle and random-baseline runs, where only coverage is measured."""

    model_version = "null"

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def embed(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(user_ids)
        return np.zeros((n, self.dim), np.float32), np.zeros(n, np.float32)


class RandomScorer:
    """Uniform random scores (seeded): selection by chance at the verifier's budget."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def score(
        self, user_ids: np.ndarray, item_ids: np.ndarray, event_time_ms: np.ndarray
    ) -> np.ndarray:
        return self._rng.random(len(user_ids)).astype(np.float32)


class ForesightScorer:
    """Scores a pair by how many times it will be looked up in the next ``horizon_ms`` (event
    time), read from the recorded traffic itself: a verifier that knows the future.

    Ranked at the verifier's per-request budget it gives the ceiling of any speculator with that
    budget (up to the greedy choice), so "efficiency" can be read against what is reachable at
    all, not only against the unlimited-budget oracle.
    """

    _TIME_BITS = 40  # ~35 years of milliseconds

    def __init__(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        horizon_ms: int,
    ) -> None:
        """One row per lookup (a request's candidate): int64 ``[n]`` each."""
        keys = self._pair_keys(user_ids, item_ids)
        self._pairs = np.unique(keys)
        self._t0 = int(event_time_ms.min()) if len(event_time_ms) else 0
        self._span_ms = int(event_time_ms.max()) - self._t0 if len(event_time_ms) else 0
        if len(self._pairs) >= 1 << (63 - self._TIME_BITS):
            raise ValueError("traffic too large for the foresight index")
        self._set_horizon(horizon_ms)
        pid = np.searchsorted(self._pairs, keys)
        self._index = np.sort((pid << self._TIME_BITS) | (event_time_ms - self._t0))

    def _set_horizon(self, horizon_ms: int) -> None:
        if self._span_ms + horizon_ms >= 1 << self._TIME_BITS:
            raise ValueError("traffic plus horizon too long for the foresight index")
        self.horizon_ms = horizon_ms

    def with_horizon(self, horizon_ms: int) -> ForesightScorer:
        """The same index looking ``horizon_ms`` ahead (no rebuild, arrays shared)."""
        other = copy.copy(self)
        other._set_horizon(horizon_ms)
        return other

    @staticmethod
    def _pair_keys(user_ids: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
        if len(item_ids) and (int(item_ids.max()) >= 1 << 31 or int(item_ids.min()) < 0):
            raise ValueError("item ids must be in [0, 2**31) for the foresight index")
        return (np.asarray(user_ids, np.int64) << 31) | np.asarray(item_ids, np.int64)

    @classmethod
    def from_requests(
        cls, requests: Sequence[tuple[int, int, Sequence[int]]], horizon_ms: int
    ) -> ForesightScorer:
        """From ``(user_id, event_time_ms, candidates)`` per request."""
        sizes = [len(c) for _, _, c in requests]
        users = np.repeat(np.array([u for u, _, _ in requests], np.int64), sizes)
        times = np.repeat(np.array([t for _, t, _ in requests], np.int64), sizes)
        items = (
            np.concatenate([np.asarray(c, np.int64) for _, _, c in requests])
            if requests
            else np.zeros(0, np.int64)
        )
        return cls(users, items, times, horizon_ms)

    def score(
        self, user_ids: np.ndarray, item_ids: np.ndarray, event_time_ms: np.ndarray
    ) -> np.ndarray:
        """Lookups of each pair in ``(t, t + horizon]``, float32 ``[B]``."""
        keys = self._pair_keys(user_ids, item_ids)
        pid = np.searchsorted(self._pairs, keys)
        known = (pid < len(self._pairs)) & (
            self._pairs[np.minimum(pid, len(self._pairs) - 1)] == keys
        )
        base = pid << self._TIME_BITS
        t = np.asarray(event_time_ms, np.int64) - self._t0
        lo = np.searchsorted(self._index, base | t, side="right")
        hi = np.searchsorted(self._index, base | (t + self.horizon_ms), side="right")
        return np.where(known, hi - lo, 0).astype(np.float32)
