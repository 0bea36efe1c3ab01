"""Redis backend: one ``MGET`` per read (one round trip), pipelined ``SET ... PX`` writes
(pairs and aggregates: a compare-and-set on their event time, :mod:`store.conditional_writes`).

Reads go through a :class:`~store.redis_pool.ReadPool` of pre-warmed connections with one overall
deadline per read (connect and handshake never happen on the request path); writes, snapshots
and ``ping`` use an ordinary redis-py client.

All keys of a user share a hash tag (see :mod:`store.keys`), so a request's first-round read
is one ``MGET`` even on Redis Cluster. The cross-user neighbour read (or a first round that
carries a reader's neighbour hint) also uses one ``MGET``, which a standalone Redis (or a
proxy) serves in one round trip; on Redis Cluster it would need one ``MGET`` per slot.

The reader's pairs come as a :class:`~store.keys.PairGrid`: their keys are packed into the
``MGET`` per user run straight from the item ids (no key objects, one join per run).
"""

from __future__ import annotations

import logging
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from store.conditional_writes import NEWER_OR_EQUAL, LuaWrite, write_newer_many
from store.errors import StoreUnavailable
from store.keyed_writes import KeyedWrites
from store.keys import KeyLayout, PairGrid, read_keys
from store.protocol import ReadBatch, ReadResult
from store.redis_pool import ReadPool, mget_header, pack_headed_keys, pack_keys
from store.redis_writes import ReplicaAck, redis_write_errors, set_px_many

_WRITE_TIMEOUT_S = 5.0
#: read connections: one per reading thread is enough; spares cover the ones being repaired
READ_POOL_SIZE = 4
log = logging.getLogger(__name__)


class RedisStore(KeyedWrites):
    """A :class:`~store.protocol.FeatureStore` on Redis.

    ``read`` blocks at most ``timeout_ms`` in total (not per socket operation) and never
    retries, so a slow or dead Redis costs the ranker at most one deadline. Its connections are
    opened by :meth:`warm` (the :class:`~store.reader.FeatureReader` calls it at construction),
    else by the first read; writers that never read open none.
    """

    def __init__(
        self,
        url: str,
        layout: KeyLayout | None = None,
        read_pool_size: int = READ_POOL_SIZE,
        ack: ReplicaAck | None = None,
    ) -> None:
        self.url = url
        self.layout = layout or KeyLayout()
        self.read_pool_size = read_pool_size
        #: writes are acknowledged only once this many replicas have them (None: the master's)
        self.ack = ack
        self._writer = self._client(_WRITE_TIMEOUT_S)
        self._pool: ReadPool | None = None
        #: Number of read round trips sent (tests assert the reader's budget with it).
        self.round_trips = 0

    def _client(self, timeout_s: float) -> redis.Redis:
        return redis.Redis.from_url(
            self.url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
        )

    def warm(self) -> None:
        """Open the read connections now (blocking, bounded); idempotent. Never raises: if Redis
        is down, a background thread keeps trying and reads fail fast until it succeeds."""
        self._read_pool()

    def _read_pool(self) -> ReadPool:
        if self._pool is None:
            self._pool = ReadPool(self.url, self.read_pool_size)
        return self._pool

    def _write(self, items: list[tuple[bytes, bytes]], ttl_ms: int) -> None:
        if not items:
            return
        with redis_write_errors("redis", len(items)):
            set_px_many(self._writer, items, ttl_ms, self.ack)

    def _write_newer(
        self, items: list[tuple[bytes, bytes]], ttl_ms: int, script: LuaWrite = NEWER_OR_EQUAL
    ) -> int:
        if not items:
            return 0
        with redis_write_errors("redis", len(items)):
            return write_newer_many(self._writer, items, ttl_ms, script, self.ack)

    def write_snapshot(self, name: str, data: bytes, ttl_ms: int) -> None:
        directory = f"{self.layout.prefix}:snaps"
        try:
            pipe = self._writer.pipeline(transaction=False)
            pipe.set(f"{self.layout.prefix}:snap:{name}", data, px=ttl_ms)
            pipe.sadd(directory, name)
            pipe.pexpire(directory, ttl_ms)
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreUnavailable(f"redis snapshot write failed: {exc}") from exc

    def read_snapshots(self) -> dict[str, bytes]:
        try:
            members = self._writer.smembers(f"{self.layout.prefix}:snaps")
            names = sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)
            if not names:
                return {}
            values: list[bytes | None] = self._writer.mget(  # type: ignore[assignment]
                [f"{self.layout.prefix}:snap:{n}" for n in names]
            )
        except redis.RedisError as exc:
            raise StoreUnavailable(f"redis snapshot read failed: {exc}") from exc
        return {n: v for n, v in zip(names, values, strict=True) if v is not None}

    def keys_for(self, batch: ReadBatch) -> list[bytes]:
        """The keys one read of ``batch`` fetches, in result order."""
        return read_keys(self.layout, batch)

    def _pack(self, batch: ReadBatch) -> bytes:
        """The ``MGET`` arguments of :meth:`keys_for`, packed without building the pair keys
        one by one when the pairs are a :class:`~store.keys.PairGrid` (the reader's)."""
        pairs = batch.pairs
        if not isinstance(pairs, PairGrid):
            return pack_keys(self.keys_for(batch))
        lay = self.layout
        parts = [pack_headed_keys(lay.pair_head(u), pairs.items) for u in pairs.users]
        parts.append(pack_keys([lay.aggregate(u) for u in batch.aggregates]))
        parts.append(pack_keys([lay.neighbours(u) for u in batch.neighbours]))
        parts.append(pack_keys([lay.history(u) for u in batch.histories]))
        parts.append(pack_keys([lay.state(u) for u in batch.states]))
        return b"".join(parts)

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        deadline = time.monotonic() + timeout_ms / 1000.0
        n_keys = batch.size()
        if not n_keys:
            return ReadResult()
        body = self._pack(batch)
        pool = self._read_pool()
        self.round_trips += 1
        values = pool.mget_packed(mget_header(n_keys) + body, n_keys, deadline)
        return ReadResult.split(batch, values)

    def ping(self) -> bool:
        try:
            return bool(self._writer.ping())
        except redis.RedisError:
            return False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        try:
            self._writer.close()
        except (redis.RedisError, OSError):  # closing must never raise
            log.warning("closing a redis client failed", exc_info=True)
