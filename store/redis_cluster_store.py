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
goes to the new owner.

Writes are routed the same way: the items are grouped by the node owning their slot and each
node gets one packed send (``SET ... PX`` or the compare-and-set ``EVALSHA`` of
:mod:`store.conditional_writes`, as on a single Redis), one round trip per node. (The cluster
client's pipeline asked the default node ``COMMAND GETKEYS`` for every ``EVAL``: 500 extra round
trips for 500 pairs, and a dead default node failed every write.)

A failover moves slots without any ``MOVED`` answer: the dead master's connections just fail.
So a write that fails to connect, times out or is redirected (``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``, ``READONLY``) raises :class:`~store.errors.StoreUnavailable` (or
:class:`~store.errors.StoreTimeout`) and marks the slot table stale: the next write re-reads it
(``CLUSTER SLOTS``) first, so the caller's retry goes to the promoted replica once there is one; a
read that fails to connect or times out re-reads it in a background thread (at most one at a
time, at most every 0.5 s: never inside a read's deadline). Before this, a long-lived client
kept the dead master in its slot table and every read and write of its slots failed until the
process restarted (``tests/integration/test_redis_cluster_failover.py``).

Select it with ``SOLARIS_STORE_BACKEND=redis-cluster`` and ``SOLARIS_STORE_URL`` naming any one
node (``redis://127.0.0.1:7000``); the client discovers the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import Connection
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.retry import Retry

from store.cluster_slots import batch_slots, group_by_node, group_by_slot
from store.conditional_writes import NEWER_OR_EQUAL, LuaWrite, write_newer_many
from store.errors import StoreTimeout, StoreUnavailable
from store.keyed_writes import KeyedWrites
from store.keys import KeyLayout, read_keys
from store.protocol import ReadBatch, ReadResult
from store.redis_writes import ReplicaAck, redis_write_errors, set_px_many
from store.urls import redact_url

_WRITE_TIMEOUT_S = 5.0
#: retries of a write after a connection error, timeout or redirection (off the request path)
_WRITE_RETRIES = 3
#: bound on any one blocking socket operation of a read (connect, send); the read's own deadline
#: is kept by waiting for the answers with what is left of it
_READ_IO_TIMEOUT_S = 1.0
#: errors of the cluster client: ``RedisClusterException`` does not derive from ``RedisError``
_CLIENT_ERRORS = (redis.RedisError, RedisClusterException)
#: write errors a fresh slot table may cure (failover, reshard): re-read it, then retry
_TOPOLOGY_ERRORS = (
    redis.ConnectionError,
    redis.TimeoutError,
    AskError,  # and MovedError
    TryAgainError,
    ClusterDownError,  # and MasterDownError
    ReadOnlyError,
    SlotNotCoveredError,
)
#: answers that mean "the slot table is stale" rather than "this write is refused"
_REDIRECTIONS = (AskError, TryAgainError, ClusterDownError, ReadOnlyError, SlotNotCoveredError)
#: least time between two background refreshes of the read client's slot table
_READ_REFRESH_INTERVAL_S = 0.5
log = logging.getLogger(__name__)


def _connect_primaries(client: RedisCluster) -> None:
    """Open (or check out and return) one connection to every primary of the slot table."""
    for node in client.get_primaries():
        pool = client.get_redis_connection(node).connection_pool
        pool.release(pool.get_connection())


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

    def __init__(
        self, url: str, layout: KeyLayout | None = None, ack: ReplicaAck | None = None
    ) -> None:
        self.url = url
        self.layout = layout or KeyLayout()
        #: each node's writes are acknowledged only once this many of its replicas have them
        self.ack = ack
        self._writer: RedisCluster | None = None
        self._read_client: RedisCluster | None = None
        #: read calls that sent commands (one round trip per node, concurrently)
        self.round_trips = 0
        #: ``MGET`` commands sent by reads: one per slot touched
        self.mgets = 0
        #: slot-table refreshes done after a failed write or read
        self.topology_refreshes = 0
        self._refresh_lock = threading.Lock()
        self._refresh_thread: threading.Thread | None = None
        self._read_refreshed_at = -_READ_REFRESH_INTERVAL_S
        #: a write failed in a way a fresh slot table may cure: the next write re-reads it first
        self._writer_stale = False

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
            _connect_primaries(self._reader())
        except (*_CLIENT_ERRORS, StoreUnavailable, OSError) as exc:
            log.warning("redis cluster warm-up failed: %s", exc)

    def _refresh(self, client: RedisCluster, disconnect: bool = True) -> bool:
        """Re-read ``client``'s slot table (``CLUSTER SLOTS`` from any reachable node); whether
        it was. Never raises: with no node reachable the next operation fails and tries again."""
        try:
            client.nodes_manager.initialize(disconnect_startup_nodes_pools=disconnect)
        except (*_CLIENT_ERRORS, OSError) as exc:
            log.warning("redis cluster slot table refresh failed: %s", exc)
            return False
        self.topology_refreshes += 1
        return True

    def _refresh_reads_soon(self) -> None:
        """Refresh the read client's slot table in a background thread, unless a refresh is
        running or one started less than ``_READ_REFRESH_INTERVAL_S`` ago."""
        client, now = self._read_client, time.monotonic()
        with self._refresh_lock:
            busy = self._refresh_thread is not None and self._refresh_thread.is_alive()
            if client is None or busy or now - self._read_refreshed_at < _READ_REFRESH_INTERVAL_S:
                return
            self._read_refreshed_at = now
            self._refresh_thread = threading.Thread(
                target=self._refresh_reader,
                args=(client,),
                name="redis-cluster-refresh",
                daemon=True,
            )
            self._refresh_thread.start()

    def _refresh_reader(self, client: RedisCluster) -> None:
        # keep the read connections (a refresh must not cost the next read a connect), and
        # connect to a promoted primary now rather than inside a read's deadline
        self._refresh(client, disconnect=False)
        try:
            _connect_primaries(client)
        except (*_CLIENT_ERRORS, OSError) as exc:
            log.debug("redis cluster connect after refresh failed: %s", exc)

    # --- writes --------------------------------------------------------------------------------

    def _write(self, items: list[tuple[bytes, bytes]], ttl_ms: int) -> None:
        def send(node: redis.Redis, part: list[tuple[bytes, bytes]]) -> int:
            set_px_many(node, part, ttl_ms, self.ack)
            return 0

        self._write_routed(items, send)

    def _write_newer(
        self, items: list[tuple[bytes, bytes]], ttl_ms: int, script: LuaWrite = NEWER_OR_EQUAL
    ) -> int:
        """The compare-and-set script per key (``EVALSHA``; a primary without the script, e.g.
        a promoted replica, loads it and the node's batch is sent again)."""
        return self._write_routed(
            items, lambda node, part: write_newer_many(node, part, ttl_ms, script, self.ack)
        )

    def _write_routed(
        self,
        items: list[tuple[bytes, bytes]],
        send: Callable[[redis.Redis, list[tuple[bytes, bytes]]], int],
    ) -> int:
        """``send`` each node its items (grouped by the slot table), one node after another;
        the sum of what ``send`` returned. An error a fresh slot table may cure marks the table
        stale (re-read by the next write) and raises (:class:`StoreUnavailable` for a
        redirection)."""
        if not items:
            return 0
        client = self._writer_client()
        if self._writer_stale:  # re-read at the retry, not at the failure: a failover may be done
            self._writer_stale = not self._refresh(client)
        with redis_write_errors("redis cluster", len(items), _CLIENT_ERRORS):
            try:
                parts = group_by_node(client, items)
                return sum(send(client.get_redis_connection(n), part) for n, part in parts)
            except _TOPOLOGY_ERRORS as exc:
                self._writer_stale = True
                if isinstance(exc, _REDIRECTIONS):
                    raise StoreUnavailable(
                        f"redis cluster write of {len(items)} keys redirected ({exc}); "
                        "the next write re-reads the slot table"
                    ) from exc
                raise

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
        return read_keys(self.layout, batch)

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        keys = self.keys_for(batch)
        if not keys:
            return ReadResult()
        deadline = time.perf_counter() + timeout_ms / 1000.0
        try:
            slots = group_by_slot(batch_slots(self.layout, batch))
            values = self._mget_by_slot(self._reader(), keys, slots, deadline)
        except redis.TimeoutError as exc:
            self._refresh_reads_soon()  # a dead master may not even refuse connections
            raise StoreTimeout(
                f"redis cluster read of {len(keys)} keys exceeded {timeout_ms} ms"
            ) from exc
        except (redis.ConnectionError, SlotNotCoveredError) as exc:
            self._refresh_reads_soon()  # a failover: the slot table still names a dead master
            raise StoreUnavailable(f"redis cluster read failed: {exc}") from exc
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
        with self._refresh_lock:
            refresh, self._refresh_thread = self._refresh_thread, None
        if refresh is not None:
            refresh.join(timeout=5.0)
        clients = [c for c in (self._read_client, self._writer) if c is not None]
        for client in clients:
            try:
                client.close()
            except (*_CLIENT_ERRORS, OSError):  # closing must never raise
                log.warning("closing a redis cluster client failed", exc_info=True)
        self._read_client = None
        self._writer = None
