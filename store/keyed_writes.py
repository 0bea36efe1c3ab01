"""The record → (key, value bytes) writes shared by the key-value backends (Redis, Redis Cluster):
a backend supplies ``layout``, ``_write(items, ttl_ms)`` and ``_write_newer(items, ttl_ms)``
(pairs and aggregates: never replace a value of a newer event time, see
:mod:`store.conditional_writes`; states: keep the previous one too, see
:mod:`store.state_slots`), this supplies the five writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.conditional_writes import NEWER_OR_EQUAL, LuaWrite
from store.keys import KeyLayout
from store.state_slots import KEEP_PREVIOUS, StateWrites, state_items
from store.values import encode_aggregate, encode_neighbours, encode_pairs


class KeyedWrites:
    """Mixin: ``write_pairs``/``_aggregates``/``_neighbours``/``_histories``/``_states``."""

    layout: KeyLayout

    #: writes of pairs/aggregates skipped because the store held a newer event time
    stale_skipped: int = 0

    def _write(self, items: list[tuple[bytes, bytes]], ttl_ms: int) -> None:
        raise NotImplementedError

    def _write_newer(
        self, items: list[tuple[bytes, bytes]], ttl_ms: int, script: LuaWrite = NEWER_OR_EQUAL
    ) -> int:
        """Write by ``script``'s rule (default: unless the stored value is newer); returns the
        number skipped."""
        raise NotImplementedError

    def write_pairs(self, pairs: Sequence[PairEmbedding], ttl_ms: int) -> None:
        keys, values = self.layout.pair_keys(pairs), encode_pairs(pairs)
        self.stale_skipped += self._write_newer(list(zip(keys, values, strict=True)), ttl_ms)

    def write_aggregates(self, aggregates: Sequence[UserAggregate], ttl_ms: int) -> None:
        agg = self.layout.aggregate
        items = [(agg(r.user_id), encode_aggregate(r)) for r in aggregates]
        self.stale_skipped += self._write_newer(items, ttl_ms)

    def write_neighbours(self, lists: Sequence[NeighbourList], ttl_ms: int) -> None:
        nb = self.layout.neighbours
        self._write([(nb(r.user_id), encode_neighbours(r)) for r in lists], ttl_ms)

    def write_histories(self, histories: Mapping[int, bytes], ttl_ms: int) -> None:
        h = self.layout.history
        self._write([(h(user), value) for user, value in histories.items()], ttl_ms)

    def write_states(self, states: StateWrites, ttl_ms: int) -> None:
        st = self.layout.state
        items = [(st(user), value) for user, value in state_items(states)]
        self.stale_skipped += self._write_newer(items, ttl_ms, KEEP_PREVIOUS)
