"""The ``FeatureStore`` contract every backend implements, and its batch read types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.state_slots import StateWrites


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """Everything one round trip fetches: pair keys, aggregate users, neighbour-list users,
    history users (a fair VM's streaming features) and state users (the state tier), in that
    order."""

    pairs: Sequence[tuple[int, int]] = ()
    aggregates: Sequence[int] = ()
    neighbours: Sequence[int] = ()
    histories: Sequence[int] = ()
    states: Sequence[int] = ()

    def size(self) -> int:
        return (
            len(self.pairs)
            + len(self.aggregates)
            + len(self.neighbours)
            + len(self.histories)
            + len(self.states)
        )


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Raw encoded values aligned with the :class:`ReadBatch` lists; ``None`` = absent.

    Values stay encoded (see :mod:`store.values`) so the reader can decode them in one
    vectorised step instead of one Python call per key.
    """

    pairs: list[bytes | None] = field(default_factory=list)
    aggregates: list[bytes | None] = field(default_factory=list)
    neighbours: list[bytes | None] = field(default_factory=list)
    histories: list[bytes | None] = field(default_factory=list)
    states: list[bytes | None] = field(default_factory=list)

    @classmethod
    def split(cls, batch: ReadBatch, values: list[bytes | None]) -> ReadResult:
        """Cut one flat list of values, in :class:`ReadBatch` order, into its five parts."""
        a = len(batch.pairs)
        b = a + len(batch.aggregates)
        c = b + len(batch.neighbours)
        d = c + len(batch.histories)
        return cls(values[:a], values[a:b], values[b:c], values[c:d], values[d:])


@runtime_checkable
class FeatureStore(Protocol):
    """A keyed store of pair embeddings, user aggregates, neighbour lists, user histories and
    user states.

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

    def write_histories(self, histories: Mapping[int, bytes], ttl_ms: int) -> None:
        """Users' encoded histories (:func:`store.history_values.encode_history`) by user id."""
        ...

    def write_states(self, states: StateWrites, ttl_ms: int) -> None:
        """Users' encoded FM states (:func:`store.values.encode_state`), ``{user: state}`` or
        ``(user, state)`` pairs merged in order: each user's key keeps its two newest states
        (:mod:`store.state_slots`); an older state never replaces the newest."""
        ...

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult: ...

    def write_snapshot(self, name: str, data: bytes, ttl_ms: int) -> None:
        """Store a named blob (e.g. a worker's KNN index) for readers off the request path."""
        ...

    def read_snapshots(self) -> dict[str, bytes]:
        """All live snapshots by name (may take a few round trips; not for the request path)."""
        ...

    def ping(self) -> bool: ...

    def close(self) -> None: ...
