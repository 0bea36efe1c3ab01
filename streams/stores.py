"""The configured feature store, from settings (the one place that maps settings to a backend)."""

from __future__ import annotations

from store.factory import open_store
from store.protocol import FeatureStore
from streams.settings import Settings


def store_from_settings(settings: Settings) -> FeatureStore:
    return open_store(
        settings.store_backend,
        url=settings.store_url,
        aerospike_hosts=settings.aerospike_hosts,
        aerospike_namespace=settings.aerospike_namespace,
        key_prefix=settings.key_prefix,
    )
