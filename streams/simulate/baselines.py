"""Models for the reference runs: an FM that costs nothing (coverage does not depend on the
vectors' values) and a random verifier (the "random selection at equal budget" baseline)."""

from __future__ import annotations

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
