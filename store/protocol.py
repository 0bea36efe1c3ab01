"""The ``FeatureStore`` contract every backend implements, and its batch read types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from schemas.records import NeighbourList, PairEmbedding, UserAggregate


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """Everything one round trip fetches: pair keys, aggregate users, neighbour-list users."""

    pairs: Sequence[tuple[int, int]] = ()
    aggregates: Sequence[int] = ()
    neighbours: Sequence[int] = ()

    def size(self) -> int:
        return len(self.pairs) + len(self.aggregates) + len(self.neighbours)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Raw encoded values aligned with the :class:`ReadBatch` lists; ``None`` = absent.

    Values stay encoded (see :mod:`store.values`) so the reader can decode them in one
    vectorised step instead of one Python call per key.
    """

    pairs: list[bytes | None] = field(default_factory=list)
    aggregates: list[bytes | None] = field(default_factory=list)
    neighbours: list[bytes | None] = field(default_factory=list)


@runtime_checkable
class FeatureStore(Protocol):
    """A keyed store of pair embeddings, user aggregates and neighbour lists.

    Contract (all backends):
    - Writes are blocking, idempotent by key (last write wins) and set a physical TTL; a batch
      is sent in one round trip where the backend allows. Freshness is *not* decided by the
      physical TTL: readers check the event time carried in each value.
    - ``read`` does exactly one round trip, blocks at most ``timeout_ms`` and raises
      :class:`~store.errors.StoreTimeout` past it; absent keys come back as ``None``.
    - Every client error is raised as a :class:`~store.errors.StoreError` subclass.
    - Instances are safe to use from one thread at a time (one per worker / ranker thread).
    """

    def write_pairs(self, pairs: Sequence[PairEmbedding], ttl_ms: int) -> None: ...

    def write_aggregates(self, aggregates: Sequence[UserAggregate], ttl_ms: int) -> None: ...

    def write_neighbours(self, lists: Sequence[NeighbourList], ttl_ms: int) -> None: ...

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult: ...

    def write_snapshot(self, name: str, data: bytes, ttl_ms: int) -> None:
        """Store a named blob (e.g. a worker's KNN index) for readers off the request path."""
        ...

    def read_snapshots(self) -> dict[str, bytes]:
        """All live snapshots by name (may take a few round trips; not for the request path)."""
        ...

    def ping(self) -> bool: ...

    def close(self) -> None: ...
