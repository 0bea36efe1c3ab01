"""Deterministic stand-ins for the ONNX models, for unit tests of pure engine logic only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from streams.engine.history import UserHistory

_TABLE_ROWS = 65_521  # prime, so ids spread over the table
_TABLES: dict[tuple[int, int], np.ndarray] = {}


def _hash_vectors(ids: np.ndarray, dim: int, salt: int) -> np.ndarray:
    table = _TABLES.get((dim, salt))
    if table is None:
        table = _TABLES[(dim, salt)] = (
            np.random.default_rng(salt).normal(size=(_TABLE_ROWS, dim)).astype(np.float32)
        )
    return table[np.asarray(ids, np.int64) % _TABLE_ROWS]


class FakeFM:
    """Embedding = user vector * item vector + mean of history item vectors (deterministic)."""

    model_version = "fake-fm-1"

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.calls = 0

    def embed(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
    ) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        emb = _hash_vectors(user_ids, self.dim, 1) * _hash_vectors(item_ids, self.dim, 2)
        for j, h in enumerate(histories):
            if h.items.size:
                emb[j] += _hash_vectors(h.items, self.dim, 2).mean(axis=0)
        return emb, emb.sum(axis=1) / self.dim


class FakeVM:
    """Score = sigmoid(user . item) over hashed vectors."""

    def score(
        self, user_ids: np.ndarray, item_ids: np.ndarray, event_time_ms: np.ndarray
    ) -> np.ndarray:
        s = (_hash_vectors(user_ids, 4, 3) * _hash_vectors(item_ids, 4, 4)).sum(axis=1)
        return (1 / (1 + np.exp(-s))).astype(np.float32)


class FakeSolaris:
    def score(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        embeddings: np.ndarray,
        tiers: np.ndarray,
    ) -> np.ndarray:
        return (1 / (1 + np.exp(-embeddings.mean(axis=1)))).astype(np.float32)


class FakeItems:
    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.mean = np.zeros(dim, np.float32)  # hashed vectors are already centred

    def lookup(self, item_ids: np.ndarray) -> np.ndarray:
        return _hash_vectors(item_ids, self.dim, 5)
