"""Embeddings grouped into runs of one user, model version, event time and width.

The FM worker sends the vectors of one request's verified pairs as one message
(:class:`~schemas.records.EmbeddingBatch`): one user, one version, one event time. The aggregate
step folds such a run with one decode and one vector sum instead of a record, a decode and an
add per pair. Pair records (the simulator's, and tests') are grouped into the same runs, so both
drivers go through one fold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from schemas.records import EmbeddingBatch, PairEmbedding


@dataclass(frozen=True, slots=True)
class EmbeddedRun:
    """Consecutive embeddings sharing user, model version, event time, dtype and width."""

    user_id: int
    event_time_ms: int
    model_version: str
    dtype: str
    dim: int
    item_ids: Sequence[int]
    #: float32 ``[len(item_ids), dim]``
    vectors: np.ndarray


def _key(emb: PairEmbedding) -> tuple[int, int, str, str, int]:
    return (emb.user_id, emb.event_time_ms, emb.model_version, emb.dtype, emb.dim)


def runs_of(embeddings: EmbeddingBatch | Iterable[PairEmbedding]) -> list[EmbeddedRun]:
    """``embeddings`` as runs, in order; a message is one run. Decodes every vector first, so
    bytes of the wrong size raise (``VectorSizeError``) before anything is folded."""
    if isinstance(embeddings, EmbeddingBatch):
        b = embeddings
        if not b.item_ids:
            return []
        return [
            EmbeddedRun(
                b.user_id, b.event_time_ms, b.model_version, b.dtype, b.dim, b.item_ids, b.arrays()
            )
        ]
    runs: list[EmbeddedRun] = []
    group: list[PairEmbedding] = []
    for emb in embeddings:
        if group and _key(emb) != _key(group[0]):
            runs.append(_run(group))
            group = []
        group.append(emb)
    if group:
        runs.append(_run(group))
    return runs


def _run(group: list[PairEmbedding]) -> EmbeddedRun:
    first = group[0]
    return EmbeddedRun(
        first.user_id,
        first.event_time_ms,
        first.model_version,
        first.dtype,
        first.dim,
        [emb.item_id for emb in group],
        np.stack([emb.array() for emb in group]),
    )
