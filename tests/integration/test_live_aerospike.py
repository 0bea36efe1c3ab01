"""One live lockstep run with the store on Aerospike, checked against the simulator.

The same run and checks as test_live_cluster (shared functions defined there, exercised on Redis
Cluster by that module): pipeline worker, FM worker and ranker run as child processes with
``SOLARIS_STORE_BACKEND=aerospike``; after a lockstep replay, every verified pair's history, pair
vector and user aggregate read back from Aerospike equals the simulator's, and the tiers the
ranker served give the simulator's exact and aggregate coverage. Aerospike keys cannot be listed
(records keep only their digest), so the values are read through the ``FeatureStore`` protocol
and the record count of each set proves the run stored nothing else.

Needs an Aerospike server: ``SOLARIS_AEROSPIKE_HOSTS``, or ``SOLARIS_TEST_INFRA=containers``
(which starts one in Docker); without one it skips, like the Aerospike store contract. Kafka and
Redis are still needed (the ranker's shared counters live in Redis on every backend).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.settings import Settings
from tests.integration.test_live_cluster import (
    check_served_coverage_equals_simulator,
    check_values_equal_simulator,
    lockstep_run,
    parity_settings,
    read_back_values,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: the store's sets that hold pair vectors and user aggregates (``<key_prefix>_<kind>``)
VALUE_SETS = ("pair", "agg")
_QUERY_TIMEOUT_MS = 10_000


@pytest.fixture(scope="session")
def aerospike_hosts(test_infra: None) -> str:
    """The configured server; skips before any bundle is trained or service started without
    one (session-scoped so it runs before the session's ``traffic``/``bundle`` fixtures)."""
    hosts = Settings().aerospike_hosts
    if not hosts:
        pytest.skip(
            "SOLARIS_AEROSPIKE_HOSTS is not set: no Aerospike server configured "
            "(SOLARIS_TEST_INFRA=containers starts one in Docker)"
        )
    pytest.importorskip("aerospike", reason="the 'aerospike' extra is not installed")
    return hosts


@contextlib.contextmanager
def aerospike_client(settings: Settings) -> Iterator[Any]:
    """A raw client on the run's server (counts and clean-up are not store operations)."""
    import aerospike

    from store.aerospike_config import client_config
    from streams.stores import aerospike_auth

    client = aerospike.client(
        client_config(settings.aerospike_hosts, aerospike_auth(settings))
    ).connect()
    try:
        yield client
    finally:
        client.close()


def records_per_set(settings: Settings) -> dict[str, int]:
    """How many records each value set of the run holds."""
    with aerospike_client(settings) as client:
        return {
            kind: len(
                client.query(settings.aerospike_namespace, f"{settings.key_prefix}_{kind}").results(
                    {"total_timeout": _QUERY_TIMEOUT_MS}
                )
            )
            for kind in VALUE_SETS
        }


def clean_up(settings: Settings) -> None:
    """Truncate the run's sets and drop its shared counters from Redis."""
    import redis

    with contextlib.suppress(Exception), aerospike_client(settings) as client:
        for kind in (*VALUE_SETS, "nb", "hist", "snap", "snapc"):
            client.truncate(settings.aerospike_namespace, f"{settings.key_prefix}_{kind}", 0)
    stats = redis.Redis.from_url(settings.store_url)
    try:
        for key in stats.scan_iter(match=f"{settings.key_prefix}:*", count=1000):
            stats.delete(key)
    finally:
        stats.close()


@pytest.fixture(scope="module")
def aerospike_run(
    aerospike_hosts: str, traffic: Path, bundle: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    settings = parity_settings(bundle, store_backend="aerospike", aerospike_hosts=aerospike_hosts)
    try:
        run = lockstep_run(settings, traffic, tmp_path_factory.mktemp("live-aerospike"))
        run["read_back"] = read_back_values(run)
        run["records"] = records_per_set(settings)
        yield run
    finally:
        clean_up(settings)


def test_aerospike_values_equal_simulator(aerospike_run: dict[str, Any], bundle: Path) -> None:
    values = aerospike_run["read_back"]
    found = {"pair": len(values.pairs), "agg": len(values.aggregates)}
    print(f"records per set: {aerospike_run['records']}; read back: {found}")
    assert aerospike_run["records"] == found, "the run stored values no verified pair explains"
    check_values_equal_simulator(aerospike_run, values, bundle)


def test_ranker_served_the_simulators_coverage_from_aerospike(
    aerospike_run: dict[str, Any], bundle: Path
) -> None:
    check_served_coverage_equals_simulator(aerospike_run, bundle)
