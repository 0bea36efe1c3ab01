"""A user's state key holds its two newest FM states, newest first (the state tier's live gap).

Why two: the ranker and the pipeline consume the same request concurrently. When the FM worker
stores request r's state before the ranker reads for r, the newest state carries r's own event
time, which the reader must not serve (only values strictly earlier than the request are), and
with one slot the state the lookup needed, that of the user's previous request, is gone. The
simulator always reads before it writes, so it never saw the race; with two slots the live
reader falls back to the previous state and serves what the simulator served.

A stored value is one sealed state value (:func:`store.values.encode_state`) or two of the
same length concatenated (newest, previous). The write rule, atomic per key:

- nothing stored, a value of another model (version tag) or of another length: store the new
  state alone;
- a newer new state: store ``new + old newest`` (the old previous drops out), or ``new``
  alone when the old newest is more than the TTL older (never served beside it: dropping it
  makes what is stored depend on event times only, not on when the store expired a value);
- the same event time (a redelivery): replace the newest, keep the previous;
- an older new state: skip (counted as stale, like pairs and aggregates).

Redis runs the rule as a Lua script (:data:`KEEP_PREVIOUS`); the in-memory store runs
:func:`merge_state`, the same rule in Python; Aerospike runs :func:`merge_state` between a
read and a generation-guarded write (:mod:`store.aerospike_cas`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from store.conditional_writes import TAG_OFFSET, LuaWrite, event_time_of
from store.values import pair_value_length

#: states kept per user
SLOTS = 2

#: KEYS[1] = state key; ARGV = new state value (one slot), ttl ms. Offsets are 1-based: the
#: int64 event time at 5, the version tag at 13..16 (see :mod:`store.conditional_writes`).
KEEP_PREVIOUS_LUA = """
local old = redis.call('GET', KEYS[1])
local new = ARGV[1]
local n = #new
if old and n >= 16 and (#old == n or #old == 2 * n)
    and string.sub(old, 13, 16) == string.sub(new, 13, 16) then
  local t_old = struct.unpack('<i8', old, 5)
  local t_new = struct.unpack('<i8', new, 5)
  if t_old > t_new then
    return 0
  end
  if t_old == t_new then
    new = new .. string.sub(old, n + 1)
  elseif t_new - t_old <= tonumber(ARGV[2]) then
    new = new .. string.sub(old, 1, n)
  end
end
redis.call('SET', KEYS[1], new, 'PX', ARGV[2])
return 1
"""
KEEP_PREVIOUS = LuaWrite(KEEP_PREVIOUS_LUA)


#: what ``write_states`` takes: ``{user: state}``, or ``(user, state)`` pairs in the order to
#: merge them (a user's older state first), so two states of one user fit in one write
StateWrites = Mapping[int, bytes] | Iterable[tuple[int, bytes]]


def state_items(states: StateWrites) -> list[tuple[int, bytes]]:
    """``states`` as ``(user, value)`` pairs in write order."""
    return list(states.items() if isinstance(states, Mapping) else states)


def merge_state(old: bytes | None, new: bytes, ttl_ms: int) -> bytes | None:
    """What the state key holds after writing ``new`` with ``ttl_ms`` over ``old`` (the Lua
    script's rule); None when ``new`` is older than the stored newest and is skipped."""
    n = len(new)
    end = TAG_OFFSET + 4
    if old is None or n < end or len(old) not in (n, SLOTS * n):
        return new
    if old[TAG_OFFSET:end] != new[TAG_OFFSET:end]:
        return new
    old_t, new_t = event_time_of(old), event_time_of(new)
    if old_t is None or new_t is None:
        return new
    if old_t > new_t:
        return None
    if old_t == new_t:
        return new + old[n:]
    return new + old[:n] if new_t - old_t <= ttl_ms else new


def split_states(raw: bytes) -> list[bytes]:
    """The stored states of one state key, newest first: two values when ``raw`` is exactly
    two of the length its header gives, else ``[raw]`` (one state, or a corrupt value the
    decoder will refuse)."""
    n = pair_value_length(raw)
    if n is None or len(raw) != SLOTS * n:
        return [raw]
    return [raw[:n], raw[n:]]
