"""Writes that never replace a newer value with an older one (issue 24 item 7).

A paused ("zombie") FM worker that resumes after its partitions moved to another worker still
holds a batch it embedded earlier; an unconditional ``SET`` would then overwrite the pairs the
new owner stored since. Pair and aggregate values carry their event time in the header
(``store.values``: bytes 4..11, little-endian int64) and their model version tag (bytes
12..15), so the store compares them atomically: a value is written when the key is absent,
holds another model's value (tags are hashes, not ordered: the newest writer wins and the
reader's version gate decides what is served; a new model's backlog must be able to replace the
old model's fresher pairs), or holds an event time ≤ the new one (equal = idempotent
redelivery); else it is skipped and counted.

Redis: one Lua script per key (``EVALSHA``, packed by hand like :mod:`store.redis_writes`),
returning 1 when written and 0 when skipped. Redis Cluster routes ``EVALSHA`` by its key. The
in-memory store applies the same rule in Python (:func:`newer_or_equal`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import redis

from store.redis_writes import ReplicaAck, send_packed_many

#: offset of the int64 event time in pair and aggregate values (after format, dtype, dim), then
#: of the uint32 model version tag
EVENT_TIME_OFFSET = 4
TAG_OFFSET = 12
_EVENT_TIME = struct.Struct("<q")

#: KEYS[1] = key; ARGV = value, ttl ms. Lua's struct reads the header's int64 event time
#: (1-based offset 5); ms since the epoch are exact in a Lua number (double) until year 287396.
#: Bytes 13..16 are the version tag.
NEWER_OR_EQUAL_LUA = """
local old = redis.call('GET', KEYS[1])
local new = ARGV[1]
if old and #old >= 16 and #new >= 16 and string.sub(old, 13, 16) == string.sub(new, 13, 16) then
  if struct.unpack('<i8', old, 5) > struct.unpack('<i8', new, 5) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


class LuaWrite:
    """A one-key write script (``KEYS[1]`` = key, ``ARGV`` = value, ttl ms; replies 1 written,
    0 skipped), sent as ``EVALSHA`` commands packed by hand."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest().encode()
        self._head = b"*6\r\n$7\r\nEVALSHA\r\n$40\r\n" + self.sha + b"\r\n$1\r\n1\r\n"

    def pack_many(self, items: Sequence[tuple[bytes, bytes]], ttl_ms: int) -> bytes:
        """``EVALSHA <sha> 1 key value ttl`` for each item, as consecutive RESP commands."""
        ttl = b"%d" % ttl_ms
        tail = b"$%d\r\n%s\r\n" % (len(ttl), ttl)
        head = self._head
        return b"".join(
            [
                b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (head, len(k), k, len(v), v, tail)
                for k, v in items
            ]
        )


NEWER_OR_EQUAL = LuaWrite(NEWER_OR_EQUAL_LUA)


def event_time_of(value: bytes) -> int | None:
    """The header event time of a pair or aggregate value; None when too short to have one."""
    if len(value) < EVENT_TIME_OFFSET + _EVENT_TIME.size:
        return None
    return int(_EVENT_TIME.unpack_from(value, EVENT_TIME_OFFSET)[0])


def newer_or_equal(old: bytes | None, new: bytes) -> bool:
    """Whether ``new`` may replace ``old`` (the rule of the Lua script, for in-process stores)."""
    end = TAG_OFFSET + 4
    if old is None or len(old) < end or len(new) < end:
        return True
    if old[TAG_OFFSET:end] != new[TAG_OFFSET:end]:  # another model's value: newest writer wins
        return True
    old_t, new_t = event_time_of(old), event_time_of(new)
    return old_t is None or new_t is None or old_t <= new_t


def write_newer_many(
    client: redis.Redis,
    items: Sequence[tuple[bytes, bytes]],
    ttl_ms: int,
    script: LuaWrite = NEWER_OR_EQUAL,
    ack: ReplicaAck | None = None,
) -> int:
    """Conditionally write every item in one packed send with ``script`` (default: never
    replace a newer event time); returns how many were *skipped*. Loads the script when the
    server lacks it (first use, or after a restart or ``SCRIPT FLUSH``) and sends the batch
    again: the writes are idempotent. Raises the first other error reply
    (``redis.ResponseError``) or the transport's error, and waits for ``ack``'s replicas, like
    :func:`store.redis_writes.set_px_many`."""
    if not items:
        return 0
    try:
        return _send(client, items, ttl_ms, script, ack)
    except redis.exceptions.NoScriptError:  # redis-py's class for the NOSCRIPT reply
        pass
    client.script_load(script.source)
    return _send(client, items, ttl_ms, script, ack)


def _send(
    client: redis.Redis,
    items: Sequence[tuple[bytes, bytes]],
    ttl_ms: int,
    script: LuaWrite,
    ack: ReplicaAck | None,
) -> int:
    replies = send_packed_many(client, script.pack_many(items, ttl_ms), len(items), ack)
    return sum(1 for written in replies if written == 0)
