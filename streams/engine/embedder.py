"""Embedding: run the FM on verified pairs (one micro-batch per call) and build PairEmbeddings.

Each pair is embedded with the user's history *as of its request's event time* (the caller
passes ``history_before(..., pair.event_time_ms)``), so a late batch computes exactly what the
FM would have computed at speculation time. Output vectors are float16 (half the bytes; the
loss, ~1e-3 relative, is far below what the VM can use).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from schemas.records import PairEmbedding, PairProposal, ProposalBatch
from schemas.vectors import VectorDtype
from streams.engine.history import UserHistory


class EmbeddingModel(Protocol):
    """The FM (ONNX). Blocking, deterministic for equal inputs, batched."""

    model_version: str
    dim: int

    def embed(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(embeddings float32 [B, dim], logits float32 [B])``."""
        ...


@dataclass(slots=True)
class EmbedderStats:
    pairs: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds if self.seconds else 0.0


class Embedder:
    """Turns verified pairs into :class:`PairEmbedding` records."""

    def __init__(self, model: EmbeddingModel, dtype: VectorDtype = VectorDtype.FLOAT16) -> None:
        self.model = model
        self.dtype = dtype
        self.stats = EmbedderStats()

    def embed(
        self, pairs: Sequence[PairProposal], histories: Sequence[UserHistory]
    ) -> list[PairEmbedding]:
        if len(pairs) != len(histories):
            raise ValueError(f"{len(pairs)} pairs but {len(histories)} histories")
        if not pairs:
            return []
        n = len(pairs)
        start = time.perf_counter()
        keys = np.array([(p.user_id, p.item_id, p.event_time_ms) for p in pairs], np.int64)
        vectors, _ = self.model.embed(keys[:, 0], keys[:, 1], keys[:, 2], histories)
        self.stats.seconds += time.perf_counter() - start
        self.stats.pairs += n
        self.stats.batches += 1
        return self._records(keys.tolist(), vectors)

    def embed_messages(
        self, batches: Sequence[ProposalBatch], histories: Sequence[UserHistory]
    ) -> list[PairEmbedding]:
        """The pairs of verified messages (``item_ids`` of each, embedded with that message's
        history): equal to :meth:`embed` over their pairs, without a record per pair going in."""
        if len(batches) != len(histories):
            raise ValueError(f"{len(batches)} messages but {len(histories)} histories")
        counts = [len(b.item_ids) for b in batches]
        n = sum(counts)
        if not n:
            return []
        start = time.perf_counter()
        items = np.fromiter(itertools.chain.from_iterable(b.item_ids for b in batches), np.int64, n)
        users = np.repeat(np.array([b.user_id for b in batches], np.int64), counts)
        times = np.repeat(np.array([b.event_time_ms for b in batches], np.int64), counts)
        per_pair = [h for h, k in zip(histories, counts, strict=True) for _ in range(k)]
        vectors, _ = self.model.embed(users, items, times, per_pair)
        self.stats.seconds += time.perf_counter() - start
        self.stats.pairs += n
        self.stats.batches += 1
        keys = zip(users.tolist(), items.tolist(), times.tolist(), strict=True)
        return self._records(keys, vectors)

    def _records(self, keys: Iterable[Sequence[int]], vectors: np.ndarray) -> list[PairEmbedding]:
        """One record per ``(user, item, time)``; the vectors converted in one call and sliced
        as bytes (cheaper than a numpy row and ``tobytes`` per pair)."""
        raw = np.ascontiguousarray(vectors, dtype=self.dtype.numpy)
        version, dim, dtype = self.model.model_version, int(raw.shape[1]), self.dtype.value
        buf, width = raw.tobytes(), raw.shape[1] * raw.itemsize
        return [
            PairEmbedding(u, i, t, version, dtype, dim, buf[o : o + width])
            for (u, i, t), o in zip(keys, range(0, len(buf), width), strict=True)
        ]
