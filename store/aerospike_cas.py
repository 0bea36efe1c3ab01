"""Conditional writes on Aerospike by check-and-set on the record generation (issue 24 item 7).

Redis compares event times inside a Lua script; Aerospike has no script over raw bytes that we
can run here, so the same rule runs in Python between a read and a guarded write:

1. one ``batch_read`` of every key's value and generation;
2. the rule (:func:`~store.conditional_writes.newer_or_equal` for pairs and aggregates,
   :func:`~store.state_slots.merge_state` for states) folds the new values over the stored
   one, in write order;
3. one ``batch_write`` of the keys whose value changed, each guarded: a stored record is
   replaced only if its generation is still the one read (``POLICY_GEN_EQ``), an absent one is
   created only if still absent (``POLICY_EXISTS_CREATE``);
4. a key whose guard failed (another writer came between read and write) is read and folded
   again, up to a bounded number of attempts.

So a write is atomic per key, as with the Lua script, at the price of one read round trip per
write batch. This module holds the pure part (the fold and the write plan); the round trips
live in :class:`store.aerospike_store.AerospikeStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: (stored value or None, new value) -> the value to store, or None when ``new`` is skipped
Merge = Callable[[bytes | None, bytes], bytes | None]

#: result codes that mean "another writer got there between our read and our write"
GENERATION_MISMATCH = 3  # RecordGenerationError
ALREADY_EXISTS = 5  # RecordExistsError
GONE = 2  # RecordNotFound: the record expired or was deleted after our read
CONFLICT_CODES = frozenset({GENERATION_MISMATCH, ALREADY_EXISTS, GONE})

#: attempts per write batch before contention is reported as an error
DEFAULT_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Stored:
    """A record as read: its value (None when absent) and generation (0 when absent)."""

    value: bytes | None
    generation: int


@dataclass(frozen=True, slots=True)
class GuardedWrite:
    """One record to write and its guard: ``generation`` > 0 replaces only that generation,
    0 creates only if the record is still absent."""

    ident: str
    value: bytes
    generation: int


@dataclass(frozen=True, slots=True)
class WritePlan:
    """What one attempt writes, and how many new values the rule skipped per key."""

    writes: list[GuardedWrite]
    skipped: dict[str, int]


def fold(old: bytes | None, news: Sequence[bytes], merge: Merge) -> tuple[bytes | None, int]:
    """``news`` applied over ``old`` in order: (the value to store, None when every new value
    was skipped; how many were skipped)."""
    value, skipped, changed = old, 0, False
    for new in news:
        merged = merge(value, new)
        if merged is None:
            skipped += 1
        else:
            value, changed = merged, True
    return (value if changed else None), skipped


def plan(stored: dict[str, Stored], pending: dict[str, list[bytes]], merge: Merge) -> WritePlan:
    """The guarded writes of one attempt over what was just read."""
    writes, skipped = [], {}
    for ident, news in pending.items():
        current = stored.get(ident, Stored(None, 0))
        value, n_skipped = fold(current.value, news, merge)
        skipped[ident] = n_skipped
        if value is not None:
            writes.append(GuardedWrite(ident, value, current.generation))
    return WritePlan(writes, skipped)


def group_in_order(items: Sequence[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    """New values by key, each key's values in write order."""
    out: dict[str, list[bytes]] = {}
    for ident, value in items:
        out.setdefault(ident, []).append(value)
    return out
