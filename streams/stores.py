"""The configured feature store, from settings (the one place that maps settings to a backend)."""

from __future__ import annotations

from store.aerospike_config import AerospikeAuth
from store.factory import open_store
from store.protocol import FeatureStore
from store.redis_writes import ReplicaAck
from streams.settings import Settings


def store_from_settings(settings: Settings) -> FeatureStore:
    return open_store(
        settings.store_backend,
        url=settings.store_url,
        aerospike_hosts=settings.aerospike_hosts,
        aerospike_namespace=settings.aerospike_namespace,
        aerospike_auth=aerospike_auth(settings),
        key_prefix=settings.key_prefix,
        redis_ack=redis_ack(settings),
    )


def redis_ack(settings: Settings) -> ReplicaAck | None:
    """The replica confirmation Redis writes wait for (None: the master's acknowledgement)."""
    if settings.redis_wait_replicas == 0:
        return None
    return ReplicaAck(settings.redis_wait_replicas, settings.redis_wait_timeout_ms)


def aerospike_auth(settings: Settings) -> AerospikeAuth:
    """Aerospike user/password and TLS from the settings (the store knows no settings)."""
    cafile = settings.aerospike_tls_cafile
    return AerospikeAuth(
        user=settings.aerospike_user,
        password=settings.aerospike_password.get_secret_value(),
        tls_name=settings.aerospike_tls_name,
        tls_cafile=str(cafile) if cafile is not None else "",
    )
