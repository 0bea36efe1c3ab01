"""A non-Python client reads features through ``solaris serve`` (issue 25 item 2).

Pairs, aggregates and a neighbour list go to the real Redis under a unique key prefix;
``solaris serve`` runs as a child process on them; the Node.js client
``tests/clients/features_client.mjs`` (built-in fetch only) asks for one request's features in
the JSON and in the binary form, and what it decoded must equal, value for value, what the
in-process ``FeatureReader`` returns for the same request. Skipped (with the reason) without a
``node`` of version 18 or later.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from bench.serve_process import ServerProcess, feature_server
from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.keys import KeyLayout
from store.reader import FeatureReader
from store.redis_store import RedisStore
from store.tiers import TIER_NAMES, Tier
from streams.engine.config import reader_config
from streams.settings import REPO_ROOT, Settings

pytestmark = pytest.mark.integration

CLIENT = REPO_ROOT / "tests" / "clients" / "features_client.mjs"
DIM = 16
VERSION = "fm-serve-it"
T = 1_704_153_600_000
MIN = 60_000
HOUR = 60 * MIN
MAX_ITEMS = 8
USER, LAPSED, NEIGHBOUR = 7, 8, 9


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found on PATH: the non-Python client needs Node.js >= 18")
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    major = int(out.stdout.strip().lstrip("v").split(".")[0] or 0)
    if major < 18:
        pytest.skip(f"node {out.stdout.strip()} has no built-in fetch (needs >= 18)")
    return node


def _vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.5, DIM).astype(np.float32)


def _populate(store: RedisStore) -> None:
    """USER: exact pairs for items 100, 102 (102's of another FM version: not served), a fresh
    aggregate. LAPSED: one pair, no aggregate, a neighbour with a pair for item 101 and an
    aggregate. Everything else missing."""
    pair = PairEmbedding.from_array
    store.write_pairs(
        [
            pair(USER, 100, T - 5 * MIN, VERSION, _vec(1)),
            pair(USER, 102, T - 5 * MIN, "another-fm", _vec(2)),
            pair(LAPSED, 103, T - 3 * MIN, VERSION, _vec(3)),
            pair(NEIGHBOUR, 101, T - 9 * MIN, VERSION, _vec(4)),
        ],
        HOUR,
    )
    agg = UserAggregate.from_array
    store.write_aggregates(
        [
            agg(USER, T - 2 * MIN, 24 * HOUR, 4, VERSION, _vec(5)),
            agg(NEIGHBOUR, T - 20 * MIN, 24 * HOUR, 3, VERSION, _vec(6)),
        ],
        HOUR,
    )
    store.write_neighbours([NeighbourList(LAPSED, T - MIN, (NEIGHBOUR,), (0.8,))], HOUR)


@pytest.fixture()
def world(redis_url: str, test_settings: Settings, tmp_path: Path) -> Iterator[ServerProcess]:
    """The stored values and a running server over them; keys deleted afterwards."""
    node = _node()
    assert node
    prefix = test_settings.key_prefix
    store = RedisStore(redis_url, KeyLayout(prefix))
    try:
        _populate(store)
    finally:
        store.close()
    overrides = {
        "SOLARIS_STORE_BACKEND": "redis",
        "SOLARIS_STORE_URL": redis_url,
        "SOLARIS_KEY_PREFIX": prefix,
        "SOLARIS_EMBEDDING_DIM": str(DIM),
        "SOLARIS_SERVE_MODEL_VERSION": VERSION,
        "SOLARIS_MAX_CANDIDATES": str(MAX_ITEMS),
        "SOLARIS_SERVE_THREADS": "2",
        # generous: a lookup missing its deadline on this loaded machine would serve "missing"
        # and fail the comparison (the deadline itself is tested in tests/unit)
        "SOLARIS_READ_DEADLINE_MS": "1000",
    }
    try:
        with feature_server(overrides, tmp_path / "serve.log") as server:
            yield server
        assert server.returncode == 0, server.log_text()[-4000:]  # SIGTERM: a clean stop
    finally:
        _delete_prefix(redis_url, prefix)


def _delete_prefix(redis_url: str, prefix: str) -> None:
    """Delete every key the test wrote under its prefix."""
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def _node_client(server: ServerProcess, fmt: str, request: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [_node(), str(CLIENT), server.url, fmt, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip(), f"node client printed nothing: {done.stderr}"
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    doc["exit_code"] = done.returncode
    return doc


REQUESTS = [
    {"user_id": USER, "item_ids": [100, 101, 102], "event_time_ms": T},
    {"user_id": LAPSED, "item_ids": [103, 101, 104, 105], "event_time_ms": T},
    {"user_id": 4242, "item_ids": [1, 2], "event_time_ms": T},
    {"user_id": USER, "item_ids": [], "event_time_ms": T},
]


def test_a_node_client_reads_what_the_in_process_reader_reads(
    world: ServerProcess, redis_url: str, test_settings: Settings
) -> None:
    settings = test_settings.model_copy(update={"read_deadline_ms": 1_000.0})
    store = RedisStore(redis_url, KeyLayout(test_settings.key_prefix))
    reader = FeatureReader(store, reader_config(settings, DIM, VERSION))
    seen: set[int] = set()
    try:
        for request in REQUESTS:
            want = reader.lookup(request["user_id"], request["item_ids"], request["event_time_ms"])
            seen.update(want.tiers.tolist())
            for fmt in ("json", "binary"):
                got = _node_client(world, fmt, request)
                assert got["exit_code"] == 0 and got["status"] == 200, got
                assert (got["n"], got["dim"]) == (len(request["item_ids"]), DIM)
                assert got["tier_codes"] == want.tiers.tolist(), (fmt, request)
                assert got["tiers"] == [TIER_NAMES[c] for c in want.tiers.tolist()]
                assert got["ages_ms"] == want.ages_ms.tolist()
                vectors = np.asarray(got["vectors"], np.float32).reshape(-1, DIM)
                np.testing.assert_array_equal(vectors, want.vectors)  # bit for bit
                assert got["read_error"] is None
                assert got["health"] == {"live": True, "store_reachable": True}
    finally:
        store.close()
    # the requests cover every kind of answer (another FM's pair is not served as exact)
    assert {Tier.EXACT, Tier.AGGREGATE, Tier.NEIGHBOUR_ITEM, Tier.MISSING} <= seen
    assert reader.lookup(USER, [102], T).tiers.tolist() == [Tier.AGGREGATE]


def test_with_a_bundle_the_node_client_gets_the_decoded_state_tier(
    bundle: Path, redis_url: str, test_settings: Settings, tmp_path: Path
) -> None:
    """A user with a stored FM state and no pairs: every candidate comes back on the state
    tier, each vector the bundle's decoder applied to that state (the in-process reader's
    values, bit for bit)."""
    from models.runtime import UserHistory
    from schemas.vectors import VectorDtype
    from store.values import encode_state
    from streams.models_loader import load_models

    _node()
    settings = test_settings.model_copy(update={"read_deadline_ms": 1_000.0})
    models, _ = load_models(settings, bundle)
    assert models.state is not None, "the bundle ships fm_state.onnx and fm_decode.onnx"
    history = UserHistory.of([3, 5, 8], [1, 0, 1], [T - 30 * MIN, T - 20 * MIN, T - 10 * MIN])
    state = models.state.states(np.array([T - MIN]), [history])[0]
    store = RedisStore(redis_url, KeyLayout(settings.key_prefix))
    store.write_states(
        {USER: encode_state(T - MIN, models.fm.model_version, state, VectorDtype.FLOAT16)}, HOUR
    )
    items = [3, 11, 12, 5]
    env = {
        "SOLARIS_STORE_BACKEND": "redis",
        "SOLARIS_STORE_URL": redis_url,
        "SOLARIS_KEY_PREFIX": settings.key_prefix,
        "SOLARIS_READ_DEADLINE_MS": "1000",
        "SOLARIS_SERVE_THREADS": "1",
    }
    try:
        args = ("--bundle", str(bundle))
        with feature_server(env, tmp_path / "serve.log", args=args) as server:
            got = _node_client(
                server, "binary", {"user_id": USER, "item_ids": items, "event_time_ms": T}
            )
        reader = FeatureReader(
            store,
            reader_config(settings, models.fm.dim, models.fm.model_version),
            states=models.state,
        )
        want = reader.lookup(USER, items, T)
    finally:
        _delete_prefix(redis_url, settings.key_prefix)
        store.close()
    assert got["status"] == 200, got
    assert got["tiers"] == ["state"] * len(items)
    vectors = np.asarray(got["vectors"], np.float32).reshape(len(items), -1)
    np.testing.assert_array_equal(vectors, want.vectors)
    stored = state.astype(np.float16).astype(np.float32)
    decoded, _ = models.state.decode(np.array(items), np.tile(stored, (len(items), 1)))
    np.testing.assert_allclose(vectors, decoded, rtol=1e-5, atol=1e-6)
    assert got["ages_ms"] == [MIN] * len(items)


def test_the_node_client_gets_a_json_400_and_the_server_counts_it(world: ServerProcess) -> None:
    too_many = {"user_id": USER, "item_ids": list(range(MAX_ITEMS + 1)), "event_time_ms": T}
    got = _node_client(world, "binary", too_many)
    assert got["exit_code"] == 1 and got["status"] == 400
    assert got["error"]["field"] == "item_ids" and str(MAX_ITEMS) in got["error"]["message"]
    got = _node_client(world, "json", {**REQUESTS[0], "user_id": "7"})
    assert got["status"] == 400 and got["error"]["field"] == "user_id"
    status, body = world.get("/metrics")
    text = body.decode()
    assert status == 200
    assert 'solaris_serve_requests_total{format="binary",status="400"} 1.0' in text
    assert 'solaris_serve_requests_total{format="json",status="400"} 1.0' in text
    status, body = world.get("/openapi.json")
    assert status == 200 and json.loads(body)["openapi"].startswith("3.1")
