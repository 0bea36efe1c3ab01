"""Build the configured :class:`~store.protocol.FeatureStore` from plain arguments."""

from __future__ import annotations

from store.aerospike_config import AerospikeAuth
from store.keys import KeyLayout
from store.protocol import FeatureStore
from store.redis_writes import ReplicaAck


def open_store(
    backend: str,
    *,
    url: str = "",
    aerospike_hosts: str = "",
    aerospike_namespace: str = "test",
    aerospike_auth: AerospikeAuth | None = None,
    key_prefix: str = "sol",
    redis_ack: ReplicaAck | None = None,
) -> FeatureStore:
    """Open a store backend by name (``redis``, ``redis-cluster``, ``aerospike`` or ``memory``);
    ``redis_ack``: Redis writes wait for that many replicas (ignored by other backends)."""
    layout = KeyLayout(key_prefix)
    if backend == "redis":
        from store.redis_store import RedisStore

        return RedisStore(url, layout, ack=redis_ack)
    if backend == "redis-cluster":
        from store.redis_cluster_store import RedisClusterStore

        return RedisClusterStore(url, layout, ack=redis_ack)
    if backend == "aerospike":
        from store.aerospike_store import AerospikeStore

        return AerospikeStore(aerospike_hosts, aerospike_namespace, key_prefix, auth=aerospike_auth)
    if backend == "memory":
        from store.memory import InMemoryStore

        return InMemoryStore(layout)
    raise ValueError(f"unknown store backend {backend!r} (redis, redis-cluster, aerospike, memory)")
