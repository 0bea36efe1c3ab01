"""Key layout: every key of one user shares a Redis Cluster hash tag ``{u<user_id>}``.

So all of a request's first-round keys (its pairs, aggregate and neighbour list) live on one
shard and one ``MGET`` serves them in a single round trip, also under Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Protocol, overload

if TYPE_CHECKING:
    from store.protocol import ReadBatch


class HasPairKey(Protocol):
    """Anything that names a pair (a :class:`~schemas.records.PairEmbedding`)."""

    @property
    def user_id(self) -> int: ...

    @property
    def item_id(self) -> int: ...


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """Builds store keys under ``prefix``; keys are bytes to skip re-encoding on hot paths."""

    prefix: str = "sol"

    def user_tag(self, user_id: int) -> str:
        return f"{self.prefix}:{{u{user_id}}}"

    def pair_head(self, user_id: int) -> str:
        """What every pair key of ``user_id`` starts with (the item id follows)."""
        return f"{self.prefix}:{{u{user_id}}}:p:"

    def pair(self, user_id: int, item_id: int) -> bytes:
        return f"{self.prefix}:{{u{user_id}}}:p:{item_id}".encode()

    def pairs(self, user_id: int, item_ids: Sequence[int]) -> list[bytes]:
        """Pair keys of one user, built with one format call (hot path: 500 per request)."""
        head = self.pair_head(user_id)
        return [f"{head}{item}".encode() for item in item_ids]

    def pair_keys(self, pairs: Iterable[HasPairKey]) -> list[bytes]:
        """``[pair(r.user_id, r.item_id) for r in pairs]`` with the prefix bound once (the FM
        writes ~100,000 pairs/s through this)."""
        p = self.prefix
        return [f"{p}:{{u{r.user_id}}}:p:{r.item_id}".encode() for r in pairs]

    def aggregate(self, user_id: int) -> bytes:
        return f"{self.prefix}:{{u{user_id}}}:agg".encode()

    def neighbours(self, user_id: int) -> bytes:
        return f"{self.prefix}:{{u{user_id}}}:nb".encode()

    def history(self, user_id: int) -> bytes:
        return f"{self.prefix}:{{u{user_id}}}:h".encode()

    def state(self, user_id: int) -> bytes:
        """The user's FM state (the state tier: decoded for any candidate by the ranker)."""
        return f"{self.prefix}:{{u{user_id}}}:st".encode()


class PairGrid(Sequence[tuple[int, int]]):
    """Every ``(user, item)`` of ``users`` x ``items``, user-major, without building the tuples.

    A :class:`~store.protocol.ReadBatch` ``pairs`` value: any store can iterate or index it
    like a list of tuples, and a store that knows it (Redis) builds its keys per user run
    straight from ``items`` (the reader's request path: 500 pairs a lookup, up to 2,000 in the
    neighbour round) instead of allocating and regrouping one tuple per key.
    """

    __slots__ = ("items", "users")

    def __init__(self, users: Sequence[int], items: Sequence[int]) -> None:
        self.users = users
        self.items = items

    def __len__(self) -> int:
        return len(self.users) * len(self.items)

    @overload
    def __getitem__(self, index: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, int]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, int] | list[tuple[int, int]]:
        if isinstance(index, slice):
            return list(self)[index]
        m = len(self.items)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("pair index out of range")
        return self.users[index // m], self.items[index % m]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for user in self.users:
            yield from zip(repeat(user), self.items)

    def __repr__(self) -> str:
        return f"PairGrid(users={list(self.users)!r}, items={list(self.items)!r})"


def read_keys(layout: KeyLayout, batch: ReadBatch) -> list[bytes]:
    """The keys one read of ``batch`` fetches, in result order (:class:`ReadBatch` order):
    pairs user-major, then aggregates, neighbours, histories and states. One definition for
    Redis and Redis Cluster (whose slot list must follow the same order)."""
    keys: list[bytes] = []
    pairs = batch.pairs
    if isinstance(pairs, PairGrid):
        for user in pairs.users:
            keys.extend(layout.pairs(user, pairs.items))
    else:
        # Pairs come grouped by user (one user per request; neighbour rounds are user-major):
        # one ``pairs`` call per run of equal users, no per-key user check.
        for user, run in groupby(pairs, key=itemgetter(0)):
            keys.extend(layout.pairs(user, [i for _, i in run]))
    keys.extend(layout.aggregate(u) for u in batch.aggregates)
    keys.extend(layout.neighbours(u) for u in batch.neighbours)
    keys.extend(layout.history(u) for u in batch.histories)
    keys.extend(layout.state(u) for u in batch.states)
    return keys
