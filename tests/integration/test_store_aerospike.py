"""The FeatureStore contract on a live Aerospike server, when one is configured."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from store.protocol import FeatureStore
from streams.settings import Settings
from tests.contract.store_contract import StoreContract

pytestmark = pytest.mark.integration


@pytest.fixture()
def store(unique: str) -> Iterator[object]:
    settings = Settings()
    if not settings.aerospike_hosts:
        pytest.skip("SOLARIS_AEROSPIKE_HOSTS is not set: no Aerospike server configured")
    pytest.importorskip("aerospike", reason="the 'aerospike' extra is not installed")
    from store.aerospike_store import AerospikeStore

    s = AerospikeStore(settings.aerospike_hosts, settings.aerospike_namespace, f"t{unique}")
    yield s
    s.close()


@pytest.fixture()
def advance() -> Callable[[int], None]:
    # Aerospike TTLs have 1 s resolution (the store rounds up): wait past the rounded TTL.
    return lambda ms: time.sleep(ms / 1000 + 1.0)


class TestAerospikeStore(StoreContract):
    # Aerospike writes stay unconditional (issue 24 item 7 left there: a compare needs the event
    # time in its own bin and a filter expression on the batch write): strict xfail, so the
    # day it is built this turns red until the marks go.
    _NOT_CONDITIONAL = pytest.mark.xfail(strict=True, reason="aerospike writes are unconditional")

    @_NOT_CONDITIONAL
    def test_an_older_pair_never_replaces_a_newer_one(self, store: FeatureStore) -> None:
        super().test_an_older_pair_never_replaces_a_newer_one(store)

    @_NOT_CONDITIONAL
    def test_an_older_aggregate_never_replaces_a_newer_one(self, store: FeatureStore) -> None:
        super().test_an_older_aggregate_never_replaces_a_newer_one(store)

    @_NOT_CONDITIONAL
    def test_an_older_state_never_replaces_a_newer_one(self, store: FeatureStore) -> None:
        super().test_an_older_state_never_replaces_a_newer_one(store)

    @_NOT_CONDITIONAL
    def test_the_previous_state_is_kept_beside_the_newest(self, store: FeatureStore) -> None:
        super().test_the_previous_state_is_kept_beside_the_newest(store)

    pass
