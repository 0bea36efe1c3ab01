"""Typed in-process records, one per Avro schema in ``schemas/avro``.

Records are frozen, slotted dataclasses: cheap to build per message and safe to share between
agents. Field names and order match the ``.avsc`` files exactly (a unit test checks it).
Vectors are kept as little-endian bytes (float16 or float32); ``.array()`` gives float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from schemas.vectors import VectorDtype, from_bytes, to_bytes


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """A ranking request; ``candidates`` are the item ids the ranker will score."""

    SCHEMA: ClassVar[str] = "RequestEvent"
    request_id: str
    user_id: int
    event_time_ms: int
    surface: str
    candidates: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ImpressionEvent:
    """One shown item with its label (1 = engaged)."""

    SCHEMA: ClassVar[str] = "ImpressionEvent"
    request_id: str
    user_id: int
    item_id: int
    event_time_ms: int
    position: int
    label: int


@dataclass(frozen=True, slots=True)
class PairProposal:
    """A speculated (``score is None``) or verified (VM probability) pair for the FM."""

    SCHEMA: ClassVar[str] = "PairProposal"
    request_id: str
    user_id: int
    item_id: int
    event_time_ms: int
    strategy: str
    score: float | None = None


@dataclass(frozen=True, slots=True)
class PairEmbedding:
    """The FM's interaction embedding of (user, item), computed for the request at event time."""

    SCHEMA: ClassVar[str] = "PairEmbedding"
    user_id: int
    item_id: int
    event_time_ms: int
    model_version: str
    dtype: str
    dim: int
    vector: bytes = field(repr=False)

    @classmethod
    def from_array(
        cls,
        user_id: int,
        item_id: int,
        event_time_ms: int,
        model_version: str,
        vector: np.ndarray,
        dtype: VectorDtype = VectorDtype.FLOAT16,
    ) -> PairEmbedding:
        return cls(
            user_id,
            item_id,
            event_time_ms,
            model_version,
            dtype.value,
            int(vector.shape[-1]),
            to_bytes(vector, dtype),
        )

    def array(self) -> np.ndarray:
        """The vector as float32, shape ``[dim]``."""
        return from_bytes(self.vector, VectorDtype(self.dtype), self.dim)


@dataclass(frozen=True, slots=True)
class UserAggregate:
    """Mean of a user's pair embeddings over ``window_ms`` of event time."""

    SCHEMA: ClassVar[str] = "UserAggregate"
    user_id: int
    event_time_ms: int
    window_ms: int
    count: int
    model_version: str
    dtype: str
    dim: int
    vector: bytes = field(repr=False)

    @classmethod
    def from_array(
        cls,
        user_id: int,
        event_time_ms: int,
        window_ms: int,
        count: int,
        model_version: str,
        vector: np.ndarray,
        dtype: VectorDtype = VectorDtype.FLOAT16,
    ) -> UserAggregate:
        return cls(
            user_id,
            event_time_ms,
            window_ms,
            count,
            model_version,
            dtype.value,
            int(vector.shape[-1]),
            to_bytes(vector, dtype),
        )

    def array(self) -> np.ndarray:
        """The vector as float32, shape ``[dim]``."""
        return from_bytes(self.vector, VectorDtype(self.dtype), self.dim)


@dataclass(frozen=True, slots=True)
class NeighbourList:
    """A user's nearest users by cosine similarity, best first."""

    SCHEMA: ClassVar[str] = "NeighbourList"
    user_id: int
    event_time_ms: int
    neighbours: tuple[int, ...]
    weights: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that could not be processed, with where it came from and why."""

    SCHEMA: ClassVar[str] = "DeadLetter"
    source_topic: str
    partition: int
    offset: int
    reason: str
    error: str
    raw_key: bytes | None
    raw_value: bytes | None
    failed_at_ms: int


@dataclass(frozen=True, slots=True)
class ProposalBatch:
    """One request's proposed (``scores`` empty) or verified pairs, with history when verified."""

    SCHEMA: ClassVar[str] = "ProposalBatch"
    request_id: str
    user_id: int
    event_time_ms: int
    candidates: int
    item_ids: tuple[int, ...]
    strategies: tuple[str, ...]
    scores: tuple[float, ...] = ()
    history_items: tuple[int, ...] = ()
    history_labels: tuple[int, ...] = ()
    history_times_ms: tuple[int, ...] = ()
    #: speculated only, per item as of the request: the item prior's decayed count and the
    #: number of the user's recent candidate lists holding it (the verifier's recurrence inputs)
    prior_counts: tuple[float, ...] = ()
    pair_counts: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class EmbeddingBatch:
    """The FM embeddings of one request's verified pairs; ``vectors`` is ``[n, dim]`` row-major."""

    SCHEMA: ClassVar[str] = "EmbeddingBatch"
    request_id: str
    user_id: int
    event_time_ms: int
    model_version: str
    dtype: str
    dim: int
    item_ids: tuple[int, ...]
    vectors: bytes = field(repr=False)

    def arrays(self) -> np.ndarray:
        """float32 ``[n, dim]``."""
        n = len(self.item_ids)
        return from_bytes(self.vectors, VectorDtype(self.dtype), n * self.dim).reshape(n, self.dim)

    def pairs(self) -> list[PairEmbedding]:
        """One :class:`PairEmbedding` per item (vectors keep their dtype bytes)."""
        width = self.dim * VectorDtype(self.dtype).numpy.itemsize
        return [
            PairEmbedding(
                self.user_id,
                item,
                self.event_time_ms,
                self.model_version,
                self.dtype,
                self.dim,
                self.vectors[j * width : (j + 1) * width],
            )
            for j, item in enumerate(self.item_ids)
        ]


Record = (
    RequestEvent
    | ImpressionEvent
    | PairProposal
    | PairEmbedding
    | UserAggregate
    | NeighbourList
    | DeadLetter
)
RECORD_TYPES: tuple[type, ...] = (
    RequestEvent,
    ImpressionEvent,
    PairProposal,
    PairEmbedding,
    UserAggregate,
    NeighbourList,
    DeadLetter,
)
