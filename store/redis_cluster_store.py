"""Redis Cluster backend: the :class:`~store.protocol.FeatureStore` contract on a sharded Redis.

Keys are those of :mod:`store.keys` (and the snapshot keys of :class:`~store.redis_store.
RedisStore`), so one user's keys share a hash slot. In a cluster an ``MGET`` may not span slots,
so a read groups its keys by slot and the slots by the node that owns them, writes one pipeline
of ``MGET`` s (one per slot) to every node involved, and only then reads the answers: a read is
one round trip per node, all in flight at once, bounded by one deadline overall. A request's
first read (one user) touches one slot, hence one ``MGET`` on one node; a neighbour read touches
one slot per neighbour.

Reads never follow redirections (that would cost another round trip inside the deadline): a
``MOVED`` answer updates the client's slot table and the read raises
:class:`~store.errors.StoreUnavailable`, so the reader serves "missing" once and the next read
goes to the new owner. Writes go through the cluster client's pipeline, which does follow
``MOVED``/``ASK`` and retries.

Select it with ``SOLARIS_STORE_BACKEND=redis-cluster`` and ``SOLARIS_STORE_URL`` naming any one
node (``redis://127.0.0.1:7000``); the client discovers the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import Connection
from redis.crc import key_slot
from redis.exceptions import MovedError, RedisClusterException
from redis.retry import Retry

from store.conditional_writes import NEWER_OR_EQUAL_LUA
from store.errors import StoreTimeout, StoreUnavailable
from store.keyed_writes import KeyedWrites
from store.keys import KeyLayout
from store.protocol import ReadBatch, ReadResult
from store.redis_writes import redis_write_errors
from store.urls import redact_url

_WRITE_TIMEOUT_S = 5.0
#: retries of a write after a connection error, timeout or redirection (off the request path)
_WRITE_RETRIES = 3
#: bound on any one blocking socket operation of a read (connect, send); the read's own deadline
#: is kept by waiting for the answers with what is left of it
_READ_IO_TIMEOUT_S = 1.0
#: errors of the cluster client: ``RedisClusterException`` does not derive from ``RedisError``
_CLIENT_ERRORS = (redis.RedisError, RedisClusterException)
log = logging.getLogger(__name__)


def batch_keys(layout: KeyLayout, batch: ReadBatch) -> list[bytes]:
    """The keys one read of ``batch`` fetches, in result order (:class:`ReadBatch` order)."""
    keys: list[bytes] = []
    # pairs come grouped by user (see RedisStore.keys_for): one format call per run of a user
    for user, run in groupby(batch.pairs, key=itemgetter(0)):
        keys.extend(layout.pairs(user, [i for _, i in run]))
    keys.extend(layout.aggregate(u) for u in batch.aggregates)
    keys.extend(layout.neighbours(u) for u in batch.neighbours)
    keys.extend(layout.history(u) for u in batch.histories)
    keys.extend(layout.state(u) for u in batch.states)
    return keys


def batch_slots(layout: KeyLayout, batch: ReadBatch) -> list[int]:
    """The cluster slot of every key of :func:`batch_keys`, in the same order.

    Every key of a user carries the hash tag ``{u<user>}`` (see :mod:`store.keys`), so the slot
    is computed once per user instead of once per key (CRC16 in Python: ~1 us a key, 500 keys
    a request).
    """
    cache: dict[int, int] = {}

    def slot(user: int) -> int:
        found = cache.get(user)
        if found is None:
            found = cache[user] = key_slot(layout.user_tag(user).encode())
        return found

    slots: list[int] = []
    for user, run in groupby(batch.pairs, key=itemgetter(0)):
        slots.extend([slot(user)] * sum(1 for _ in run))
    slots.extend(slot(u) for u in batch.aggregates)
    slots.extend(slot(u) for u in batch.neighbours)
    slots.extend(slot(u) for u in batch.histories)
    slots.extend(slot(u) for u in batch.states)
    return slots


def group_by_slot(slots: Sequence[int]) -> dict[int, list[int]]:
    """Indices by slot (``slots[i]`` is key i's slot); slots and indices in first-seen order."""
    groups: dict[int, list[int]] = {}
    for i, slot in enumerate(slots):
        groups.setdefault(slot, []).append(i)
    return groups


@dataclass(slots=True)
class _NodeRead:
    """One node's share of a read: its connection and the key indices of each ``MGET`` sent."""

    client: redis.Redis
    connection: Connection
    groups: list[list[int]] = field(default_factory=list)
    done: bool = False


class RedisClusterStore(KeyedWrites):
    """A :class:`~store.protocol.FeatureStore` on Redis Cluster.

    Reads share one client that never retries; each read waits for its answers only as long
    as its deadline leaves. :meth:`warm` (called by :class:`~store.reader.FeatureReader`) builds
    that client, which asks the cluster for its slot table, and opens a connection to every
    primary, so a lookup pays neither; a client used without it builds them on first use.
    Opening the store never blocks, and an unreachable cluster surfaces as
    :class:`~store.errors.StoreUnavailable`.
    """

    def __init__(self, url: str, layout: KeyLayout | None = None) -> None:
        self.url = url
        self.layout = layout or KeyLayout()
        self._writer: RedisCluster | None = None
        self._read_client: RedisCluster | None = None
        #: read calls that sent commands (one round trip per node, concurrently)
        self.round_trips = 0
        #: ``MGET`` commands sent by reads: one per slot touched
        self.mgets = 0

    def _client(self, timeout_s: float, retries: int) -> RedisCluster:
        try:
            return RedisCluster.from_url(
                self.url,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), retries),
                health_check_interval=0,
            )
        except _CLIENT_ERRORS as exc:
            raise StoreUnavailable(
                f"redis cluster at {redact_url(self.url)} unreachable: {exc}"
            ) from exc

    def _writer_client(self) -> RedisCluster:
        if self._writer is None:
            self._writer = self._client(_WRITE_TIMEOUT_S, _WRITE_RETRIES)
        return self._writer

    def _reader(self) -> RedisCluster:
        # One client for every deadline: one per distinct deadline (a lookup's second round has
        # whatever budget is left) asked the cluster for its slot table inside the deadline.
        if self._read_client is None:
            self._read_client = self._client(_READ_IO_TIMEOUT_S, 0)
        return self._read_client

    def warm(self) -> None:
        """Build the read client and connect to every primary now (blocking, bounded by the
        socket timeouts); idempotent. Never raises: a read then reports what is wrong."""
        try:
            client = self._reader()
            for node in client.get_primaries():
                pool = client.get_redis_connection(node).connection_pool
                pool.release(pool.get_connection())
        except (*_CLIENT_ERRORS, StoreUnavailable, OSError) as exc:
            log.warning("redis cluster warm-up failed: %s", exc)

    # --- writes --------------------------------------------------------------------------------

    def _write(self, items: list[tuple[bytes, bytes]], ttl_ms: int) -> None:
        if not items:
            return
        with redis_write_errors("redis cluster", len(items), _CLIENT_ERRORS):
            pipe = self._writer_client().pipeline()
            for key, value in items:
                pipe.set(key, value, px=ttl_ms)
            pipe.execute()

    def _write_newer(self, items: list[tuple[bytes, bytes]], ttl_ms: int) -> int:
        """The compare-and-set script per key; ``EVAL`` (not ``EVALSHA``): every primary may
        lack a cached script (failover, new node), and Redis caches it on first use anyway."""
        if not items:
            return 0
        with redis_write_errors("redis cluster", len(items), _CLIENT_ERRORS):
            pipe = self._writer_client().pipeline()
            for key, value in items:
                pipe.execute_command("EVAL", NEWER_OR_EQUAL_LUA, 1, key, value, ttl_ms)
            return sum(1 for written in pipe.execute() if written == 0)

    def write_snapshot(self, name: str, data: bytes, ttl_ms: int) -> None:
        directory = f"{self.layout.prefix}:snaps"
        try:
            pipe = self._writer_client().pipeline()
            pipe.set(f"{self.layout.prefix}:snap:{name}", data, px=ttl_ms)
            pipe.sadd(directory, name)
            pipe.pexpire(directory, ttl_ms)
            pipe.execute()
        except _CLIENT_ERRORS as exc:
            raise StoreUnavailable(f"redis cluster snapshot write failed: {exc}") from exc

    def read_snapshots(self) -> dict[str, bytes]:
        try:
            client = self._writer_client()
            members = client.smembers(f"{self.layout.prefix}:snaps")
            names = sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)
            if not names:
                return {}
            # snapshot keys have no hash tag: one MGET per slot, sent by the client
            values: list[bytes | None] = client.mget_nonatomic(
                [f"{self.layout.prefix}:snap:{n}" for n in names]
            )
        except _CLIENT_ERRORS as exc:
            raise StoreUnavailable(f"redis cluster snapshot read failed: {exc}") from exc
        return {n: v for n, v in zip(names, values, strict=True) if v is not None}

    # --- reads ---------------------------------------------------------------------------------

    def keys_for(self, batch: ReadBatch) -> list[bytes]:
        """The keys one read of ``batch`` fetches, in result order."""
        return batch_keys(self.layout, batch)

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        keys = self.keys_for(batch)
        if not keys:
            return ReadResult()
        deadline = time.perf_counter() + timeout_ms / 1000.0
        try:
            slots = group_by_slot(batch_slots(self.layout, batch))
            values = self._mget_by_slot(self._reader(), keys, slots, deadline)
        except redis.TimeoutError as exc:
            raise StoreTimeout(
                f"redis cluster read of {len(keys)} keys exceeded {timeout_ms} ms"
            ) from exc
        except MovedError as exc:
            raise StoreUnavailable(
                f"redis cluster slot {exc.slot_id} moved to {exc.host}:{exc.port} "
                "(slot table updated; the next read goes there)"
            ) from exc
        except _CLIENT_ERRORS as exc:
            raise StoreUnavailable(f"redis cluster read failed: {exc}") from exc
        return ReadResult.split(batch, values)

    def _mget_by_slot(
        self,
        client: RedisCluster,
        keys: list[bytes],
        slots: dict[int, list[int]],
        deadline: float,
    ) -> list[bytes | None]:
        """One ``MGET`` per slot, pipelined per node; all nodes written before any is read."""
        by_node: dict[str, tuple[ClusterNode, list[list[int]]]] = {}
        for slot, indices in slots.items():
            node = client.nodes_manager.get_node_from_slot(slot)
            by_node.setdefault(node.name, (node, []))[1].append(indices)
        sent: list[_NodeRead] = []
        out: list[bytes | None] = [None] * len(keys)
        try:
            for node, groups in by_node.values():
                node_client = client.get_redis_connection(node)
                read = _NodeRead(node_client, node_client.connection_pool.get_connection(), groups)
                sent.append(read)
                commands = [("MGET", *(keys[i] for i in g)) for g in groups]
                read.connection.send_packed_command(read.connection.pack_commands(commands))
            self.round_trips += 1
            self.mgets += len(slots)
            for read in sent:
                self._collect(client, read, keys, deadline, out)
        finally:
            for read in sent:
                if not read.done:  # unread answers would reach the next user of the connection
                    read.connection.disconnect()
                read.client.connection_pool.release(read.connection)
        return out

    @staticmethod
    def _collect(
        client: RedisCluster,
        read: _NodeRead,
        keys: list[bytes],
        deadline: float,
        out: list[bytes | None],
    ) -> None:
        """Read one node's ``MGET`` answers into ``out``, within what is left of the deadline."""
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or not read.connection.can_read(timeout=remaining):
            raise redis.TimeoutError(
                f"no answer from {read.connection.host}:{read.connection.port}"
            )
        for indices in read.groups:
            try:
                values: Any = read.client.parse_response(read.connection, "MGET")
            except MovedError as exc:
                client.nodes_manager.move_slot(exc)  # the next read goes to the new owner
                raise
            for i, value in zip(indices, values, strict=True):
                out[i] = value
        read.done = True

    # --- lifecycle -----------------------------------------------------------------------------

    def ping(self) -> bool:
        """True when every primary answers ``PING``."""
        try:
            return bool(self._writer_client().ping(target_nodes=RedisCluster.PRIMARIES))
        except (*_CLIENT_ERRORS, StoreUnavailable):
            return False

    def close(self) -> None:
        clients = [c for c in (self._read_client, self._writer) if c is not None]
        for client in clients:
            try:
                client.close()
            except (*_CLIENT_ERRORS, OSError):  # closing must never raise
                log.warning("closing a redis cluster client failed", exc_info=True)
        self._read_client = None
        self._writer = None
