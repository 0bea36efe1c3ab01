"""``SET key value PX ttl`` for a whole batch, packed by hand and sent in one ``sendall``.

Why not redis-py's pipeline: it builds a command object per ``SET``, packs each one and parses
every reply through its generic machinery, about 12 µs of CPU per key measured here (512 keys
of 150 B), which made it the largest single cost of the FM worker. The same commands packed
as one RESP blob cost about 2 µs per key. Connections, authentication, TLS and reply parsing
stay redis-py's (a pooled connection of the caller's client).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from store.errors import ReplicaShortfall, StoreRefused, StoreTimeout, StoreUnavailable

_SET_HEAD = b"*5\r\n$3\r\nSET\r\n"


def pack_set_px(items: Sequence[tuple[bytes, bytes]], ttl_ms: int) -> bytes:
    """``SET k v PX ttl_ms`` for each ``(k, v)``, as consecutive RESP commands."""
    ttl = b"%d" % ttl_ms
    tail = b"$2\r\nPX\r\n$%d\r\n%s\r\n" % (len(ttl), ttl)
    return b"".join(
        [
            b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (_SET_HEAD, len(k), k, len(v), v, tail)
            for k, v in items
        ]
    )


@dataclass(frozen=True, slots=True)
class ReplicaAck:
    """Acknowledge a write only once ``replicas`` replicas have it (``WAIT replicas
    timeout_ms`` after the batch, on the same connection: WAIT counts the replication offset of
    the connection's own writes). Redis replication is asynchronous; without it a write the
    master acknowledged just before dying may be missing on the promoted replica."""

    replicas: int
    timeout_ms: int

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.timeout_ms < 1:
            raise ValueError(f"ReplicaAck needs replicas >= 1 and timeout_ms >= 1, got {self}")

    def pack(self) -> bytes:
        n, t = b"%d" % self.replicas, b"%d" % self.timeout_ms
        return b"*3\r\n$4\r\nWAIT\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(n), n, len(t), t)


def send_packed_many(
    client: redis.Redis, packed: bytes, replies: int, ack: ReplicaAck | None = None
) -> list[object]:
    """Send ``packed`` (``replies`` RESP commands) on one pooled connection, read every reply.

    Every reply is read even after an error reply, so the connection stays in step; on any
    other failure (timeout, reset) the connection is dropped, since replies may be left unread.
    Raises the first error reply (``redis.ResponseError``) or the transport's error. With
    ``ack``, a ``WAIT`` follows the commands and fewer replicas than asked raise
    :class:`~store.errors.ReplicaShortfall` (the writes are applied on the master, not
    acknowledged: the caller retries them).
    """
    pool = client.connection_pool
    conn = pool.get_connection()
    out: list[object] = []
    first_error: redis.ResponseError | None = None
    confirmed: object = 0
    try:
        conn.send_packed_command([packed if ack is None else packed + ack.pack()], False)
        for _ in range(replies + (ack is not None)):
            try:
                out.append(conn.read_response(disable_decoding=True))
            except redis.ResponseError as exc:  # e.g. MOVED: read on, keep the first
                first_error = first_error or exc
        if ack is not None and first_error is None:
            confirmed = out.pop()
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
    if first_error is not None:
        raise first_error
    if ack is not None and not (isinstance(confirmed, int) and confirmed >= ack.replicas):
        raise ReplicaShortfall(
            f"{replies} writes applied by the master, confirmed by {confirmed} of "
            f"{ack.replicas} replica(s) within {ack.timeout_ms} ms: not acknowledged"
        )
    return out


def set_px_many(
    client: redis.Redis,
    items: Sequence[tuple[bytes, bytes]],
    ttl_ms: int,
    ack: ReplicaAck | None = None,
) -> None:
    """Write every item with one packed send, then read one reply per item (see
    :func:`send_packed_many` for errors and ``ack``)."""
    if items:
        send_packed_many(client, pack_set_px(items, ttl_ms), len(items), ack)


@contextmanager
def redis_write_errors(
    what: str, keys: int, transport: tuple[type[Exception], ...] = (redis.RedisError,)
) -> Iterator[None]:
    """Translate a Redis write's client errors: timeout → :class:`~store.errors.StoreTimeout`, an error
    reply (NOPERM, WRONGTYPE, OOM, READONLY) → :class:`~store.errors.StoreRefused`, any other ``transport``
    error → :class:`~store.errors.StoreUnavailable`. ``what`` names the backend in the message."""
    try:
        yield
    except redis.TimeoutError as exc:
        raise StoreTimeout(f"{what} write of {keys} keys timed out: {exc}") from exc
    except redis.ResponseError as exc:
        raise StoreRefused(f"{what} refused the write: {exc}") from exc
    except transport as exc:
        raise StoreUnavailable(f"{what} write failed: {exc}") from exc
