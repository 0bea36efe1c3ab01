"""In-process backend for unit tests and the offline simulator.

Physical expiry follows an injectable clock (ms). The simulator passes an *event-time* clock so
offline runs expire values exactly as event-time freshness would; the default is wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.conditional_writes import newer_or_equal
from store.keys import KeyLayout
from store.protocol import ReadBatch, ReadResult
from store.state_slots import StateWrites, merge_state, state_items
from store.values import encode_aggregate, encode_neighbours, encode_pairs


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class InMemoryStore:
    """A dict of ``key -> (expires_at_ms, value)``; same encoding and key layout as Redis."""

    def __init__(
        self, layout: KeyLayout | None = None, clock_ms: Callable[[], int] = _wall_clock_ms
    ) -> None:
        self.layout = layout or KeyLayout()
        self._clock_ms = clock_ms
        self._data: dict[bytes, tuple[int, bytes]] = {}
        #: Number of read round trips served (tests assert the reader's budget with it).
        self.round_trips = 0
        #: pair/aggregate writes skipped because a newer event time was stored
        self.stale_skipped = 0

    def _put_many(self, items: Sequence[tuple[bytes, bytes]], ttl_ms: int) -> None:
        """Every write goes through here (one clock read per batch; subclasses that record
        writes override only this)."""
        expires = self._clock_ms() + ttl_ms
        self._data.update([(k, (expires, v)) for k, v in items])

    def _put(self, key: bytes, value: bytes, ttl_ms: int) -> None:
        self._put_many([(key, value)], ttl_ms)

    def _get(self, key: bytes, now_ms: int) -> bytes | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[0] <= now_ms:
            del self._data[key]
            return None
        return entry[1]

    def _put_newer(self, items: Sequence[tuple[bytes, bytes]], ttl_ms: int) -> None:
        """The Redis script's rule (:func:`~store.conditional_writes.newer_or_equal`): a value
        of an older event time never replaces a newer one."""
        now = self._clock_ms()
        kept = [(k, v) for k, v in items if newer_or_equal(self._get(k, now), v)]
        self.stale_skipped += len(items) - len(kept)
        self._put_many(kept, ttl_ms)

    def write_pairs(self, pairs: Sequence[PairEmbedding], ttl_ms: int) -> None:
        keys, values = self.layout.pair_keys(pairs), encode_pairs(pairs)
        self._put_newer(list(zip(keys, values, strict=True)), ttl_ms)

    def write_aggregates(self, aggregates: Sequence[UserAggregate], ttl_ms: int) -> None:
        agg = self.layout.aggregate
        self._put_newer([(agg(r.user_id), encode_aggregate(r)) for r in aggregates], ttl_ms)

    def write_neighbours(self, lists: Sequence[NeighbourList], ttl_ms: int) -> None:
        for rec in lists:
            self._put(self.layout.neighbours(rec.user_id), encode_neighbours(rec), ttl_ms)

    def write_histories(self, histories: Mapping[int, bytes], ttl_ms: int) -> None:
        h = self.layout.history
        self._put_many([(h(user), value) for user, value in histories.items()], ttl_ms)

    def write_states(self, states: StateWrites, ttl_ms: int) -> None:
        """The Redis script's rule (:func:`~store.state_slots.merge_state`), one state at a
        time in write order: the newest two states per user, an older one never replaces the
        newest. The rule sees a value the clock expired too (Redis would have expired it only
        in wall time): it decides on event times alone."""
        st = self.layout.state
        merged: dict[bytes, bytes] = {}
        for user, value in state_items(states):
            key = st(user)
            entry = self._data.get(key)
            old = merged[key] if key in merged else (entry[1] if entry else None)
            new = merge_state(old, value, ttl_ms)
            if new is None:
                self.stale_skipped += 1
            else:
                merged[key] = new
        self._put_many(list(merged.items()), ttl_ms)

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        del timeout_ms  # in-process reads cannot block
        self.round_trips += 1
        now = self._clock_ms()
        lay = self.layout
        return ReadResult(
            pairs=[self._get(lay.pair(u, i), now) for u, i in batch.pairs],
            aggregates=[self._get(lay.aggregate(u), now) for u in batch.aggregates],
            neighbours=[self._get(lay.neighbours(u), now) for u in batch.neighbours],
            histories=[self._get(lay.history(u), now) for u in batch.histories],
            states=[self._get(lay.state(u), now) for u in batch.states],
        )

    def write_snapshot(self, name: str, data: bytes, ttl_ms: int) -> None:
        self._put(self._snapshot_key(name), data, ttl_ms)

    def read_snapshots(self) -> dict[str, bytes]:
        now = self._clock_ms()
        prefix = self._snapshot_key("")
        out = {}
        for key in [k for k in self._data if k.startswith(prefix)]:
            value = self._get(key, now)
            if value is not None:
                out[key[len(prefix) :].decode()] = value
        return out

    def _snapshot_key(self, name: str) -> bytes:
        return f"{self.layout.prefix}:snap:{name}".encode()

    def __len__(self) -> int:
        return len(self._data)

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        self._data.clear()
