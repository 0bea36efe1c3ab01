"""``solaris serve`` without services: the aiohttp app over an in-memory store (answers equal
the in-process reader's), errors, health, metrics, the reader deadline, and the OpenAPI
document checked against the answers it describes (request parsing and the two answer
encodings: ``test_feature_server_protocol.py``)."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import jsonschema
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from schemas.limits import MAX_EVENT_TIME_MS
from schemas.records import PairEmbedding, UserAggregate
from store.errors import StoreTimeout
from store.memory import InMemoryStore
from store.protocol import ReadBatch, ReadResult
from store.reader import FeatureReader
from store.tiers import TIER_NAMES, Tier
from streams.engine.config import ENGINE_DEFAULTS
from streams.serve.metrics import ServeMetrics
from streams.serve.openapi import FEATURES_PATH, openapi_document
from streams.serve.protocol import (
    decode_binary,
)
from streams.serve.readers import ReaderPool
from streams.serve.server import ServeOptions, build_app

T0 = 1_700_000_000_000
HOUR = 3_600_000
DIM = 8
MAX_ITEMS = 5


def _store() -> InMemoryStore:
    store = InMemoryStore(clock_ms=lambda: T0)
    vec = np.linspace(-1, 1, DIM, dtype=np.float32)
    store.write_pairs([PairEmbedding.from_array(1, 10, T0 - 5, "fm", vec * 0.3)], HOUR)
    store.write_pairs([PairEmbedding.from_array(1, 12, T0 - 9, "fm", vec / 3)], HOUR)
    store.write_aggregates([UserAggregate.from_array(1, T0 - 7, 24 * HOUR, 2, "fm", vec)], HOUR)
    return store


def _reader(store: InMemoryStore, deadline_ms: float = 1_000.0) -> FeatureReader:
    cfg = replace(
        ENGINE_DEFAULTS.reader,
        dim=DIM,
        pair_ttl_ms=HOUR,
        aggregate_ttl_ms=HOUR,
        deadline_ms=deadline_ms,
    )
    return FeatureReader(store, cfg)


Check = Callable[[TestClient[Any, Any], ServeMetrics], Awaitable[None]]


def _run(
    check: Check, store: InMemoryStore, ping: bool = True, deadline_ms: float = 1_000.0
) -> None:
    async def main() -> None:
        pool = ReaderPool(lambda: _reader(store, deadline_ms), 2)
        pool.warm()
        metrics = ServeMetrics()
        app = build_app(pool, lambda: ping, ServeOptions(DIM, MAX_ITEMS, "fm"), metrics)
        try:
            async with TestClient(TestServer(app)) as client:
                await check(client, metrics)
        finally:
            pool.close()

    asyncio.run(main())


def _metric(metrics: ServeMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


REQUEST = {"user_id": 1, "item_ids": [10, 11, 12, 13], "event_time_ms": T0}


def test_json_and_binary_answers_equal_the_in_process_reader() -> None:
    store = _store()
    expected = _reader(store).lookup(1, REQUEST["item_ids"], T0)  # type: ignore[arg-type]
    assert expected.tiers.tolist() == [Tier.EXACT, Tier.AGGREGATE, Tier.EXACT, Tier.AGGREGATE]

    async def check(client: TestClient[Any, Any], metrics: ServeMetrics) -> None:
        got = await client.post(FEATURES_PATH, json=REQUEST)
        assert got.status == 200 and got.content_type == "application/json"
        doc = await got.json()
        assert doc["tier_codes"] == expected.tiers.tolist()
        assert doc["tiers"] == ["exact", "aggregate", "exact", "aggregate"]
        assert doc["ages_ms"] == expected.ages_ms.tolist()
        np.testing.assert_array_equal(np.asarray(doc["vectors"], np.float32), expected.vectors)
        assert (doc["model_version"], doc["read_error"]) == ("fm", None)
        got = await client.post(
            FEATURES_PATH, json=REQUEST, headers={"Accept": "application/octet-stream"}
        )
        assert got.status == 200 and got.content_type == "application/octet-stream"
        assert got.headers["X-Solaris-Tier-Names"] == ",".join(TIER_NAMES)
        back, failed = decode_binary(await got.read())
        assert not failed
        np.testing.assert_array_equal(back.tiers, expected.tiers)
        np.testing.assert_array_equal(back.ages_ms, expected.ages_ms)
        np.testing.assert_array_equal(back.vectors, expected.vectors)
        for fmt in ("json", "binary"):
            assert _metric(metrics, "solaris_serve_requests_total", status="200", format=fmt) == 1
        assert _metric(metrics, "solaris_serve_lookups_total", tier="exact") == 4
        assert _metric(metrics, "solaris_serve_lookups_total", tier="aggregate") == 4

    _run(check, store)


def test_bad_requests_get_400_with_a_json_body_and_are_counted() -> None:
    async def check(client: TestClient[Any, Any], metrics: ServeMetrics) -> None:
        cases = [
            ({**REQUEST, "item_ids": list(range(MAX_ITEMS + 1))}, "item_ids"),
            ({"user_id": 1, "event_time_ms": T0}, "item_ids"),
            ({**REQUEST, "user_id": "one"}, "user_id"),
        ]
        for body, field in cases:
            got = await client.post(
                FEATURES_PATH, json=body, headers={"Accept": "application/octet-stream"}
            )
            assert got.status == 400 and got.content_type == "application/json"
            doc = await got.json()
            assert doc["error"] == "bad_request" and doc["field"] == field, doc
        got = await client.post(FEATURES_PATH, data=b"\xff\xfe")
        assert got.status == 400 and (await got.json())["field"] is None
        assert _metric(metrics, "solaris_serve_requests_total", status="400", format="binary") == 3
        assert _metric(metrics, "solaris_serve_requests_total", status="400", format="json") == 1
        got = await client.get("/v1/nothing")
        assert got.status == 404 and (await got.json())["error"] == "not_found"
        got = await client.get(FEATURES_PATH)
        assert got.status == 405 and (await got.json())["error"] == "method_not_allowed"
        got = await client.post(FEATURES_PATH, data=io.BytesIO(b" " * (2 << 20)))
        assert got.status == 413 and "error" in await got.json()

    _run(check, _store())


@pytest.mark.parametrize("reachable", [True, False])
def test_healthz_pings_the_store(reachable: bool) -> None:
    async def check(client: TestClient[Any, Any], metrics: ServeMetrics) -> None:
        got = await client.get("/healthz")
        assert got.status == (200 if reachable else 503)
        assert await got.json() == {"live": True, "store_reachable": reachable}

    _run(check, _store(), ping=reachable)


class _TimingOutStore(InMemoryStore):
    """A store whose reads use up their whole timeout, then raise (a Redis that went silent)."""

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        time.sleep(timeout_ms / 1000.0)
        raise StoreTimeout("no reply")


def test_a_store_timeout_serves_missing_within_the_deadline_and_is_counted() -> None:
    store = _TimingOutStore(clock_ms=lambda: T0)

    async def check(client: TestClient[Any, Any], metrics: ServeMetrics) -> None:
        t0 = time.perf_counter()
        got = await client.post(FEATURES_PATH, json=REQUEST)
        elapsed = time.perf_counter() - t0
        doc = await got.json()
        assert got.status == 200 and doc["read_error"] == "timeout"
        assert doc["tiers"] == [TIER_NAMES[Tier.MISSING]] * 4 and doc["ages_ms"] == [-1] * 4
        assert not np.asarray(doc["vectors"]).any()
        assert got.headers["X-Solaris-Read-Error"] == "timeout"
        assert elapsed < 0.5  # deadline 50 ms; generous for a loaded 2-core machine
        got = await client.post(
            FEATURES_PATH, json=REQUEST, headers={"Accept": "application/octet-stream"}
        )
        assert decode_binary(await got.read()).read_failed
        assert _metric(metrics, "solaris_serve_reader_timeouts_total") == 2
        assert _metric(metrics, "solaris_serve_lookups_total", tier="missing") == 8
        text = (await (await client.get("/metrics")).read()).decode()
        assert "solaris_serve_reader_timeouts_total 2.0" in text
        assert 'solaris_serve_request_seconds_count{format="json"} 1.0' in text

    _run(check, store, deadline_ms=50.0)


def test_each_worker_thread_has_its_own_reader() -> None:
    built: list[FeatureReader] = []

    def make() -> FeatureReader:
        built.append(_reader(_store()))
        return built[-1]

    pool = ReaderPool(make, 3)
    try:
        assert pool.warm() == 3
        assert len({id(r) for r in built}) == 3

        async def ids() -> set[int]:
            got = await asyncio.gather(*(pool.run(id) for _ in range(30)))
            return set(got)

        assert asyncio.run(ids()) <= {id(r) for r in built}
    finally:
        pool.close()


# --- OpenAPI -----------------------------------------------------------------------------------


def _validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    """A validator of components/schemas/<name>, its $refs resolved inside the document."""
    registry: Registry[Any] = Registry().with_resource(
        "urn:solaris-openapi", Resource.from_contents(doc, default_specification=DRAFT202012)
    )
    return jsonschema.Draft202012Validator(
        {"$ref": f"urn:solaris-openapi#/components/schemas/{name}"}, registry=registry
    )


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_openapi_document_is_well_formed() -> None:
    doc = openapi_document(MAX_ITEMS, DIM)
    assert doc["openapi"].startswith("3.1.") and doc["info"]["title"]
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    for ref in _refs(doc):  # every $ref points at a component that exists
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"]
    ops = [op for path in doc["paths"].values() for op in path.values()]
    assert {op["operationId"] for op in ops} == {"getFeatures", "health", "metrics", "openapi"}
    assert all(op["responses"] for op in ops)
    layout = doc["paths"][FEATURES_PATH]["post"]["responses"]["200"]["content"]
    assert "uint8 tier codes" in layout["application/octet-stream"]["schema"]["description"]
    request = _validator(doc, "FeatureRequest")
    assert request.is_valid(REQUEST)
    for bad in (  # what the server refuses, the document refuses too
        {**REQUEST, "item_ids": list(range(MAX_ITEMS + 1))},
        {**REQUEST, "user_id": -1},
        {**REQUEST, "event_time_ms": MAX_EVENT_TIME_MS},
        {"user_id": 1, "item_ids": []},
    ):
        assert not request.is_valid(bad)


def test_served_answers_match_the_openapi_document() -> None:
    async def check(client: TestClient[Any, Any], metrics: ServeMetrics) -> None:
        got = await client.get("/openapi.json")
        doc = await got.json()
        assert doc == json.loads(json.dumps(openapi_document(MAX_ITEMS, DIM)))
        answer = await (await client.post(FEATURES_PATH, json=REQUEST)).json()
        _validator(doc, "FeatureResponse").validate(answer)
        error = await (await client.post(FEATURES_PATH, json={"user_id": 1})).json()
        _validator(doc, "Error").validate(error)
        _validator(doc, "Health").validate(await (await client.get("/healthz")).json())
        wrong = {**answer, "tiers": ["nope"] * 4}
        assert not _validator(doc, "FeatureResponse").is_valid(wrong)
        short = {**answer, "vectors": [v[:-1] for v in answer["vectors"]]}
        assert not _validator(doc, "FeatureResponse").is_valid(short)

    _run(check, _store())


def test_a_slow_store_under_many_clients_gets_fast_refusals_not_a_queue() -> None:
    """200 clients at once, one reader thread, 20 ms lookups: without bounds they queued for
    ~4 s and every abandoned one still took a thread. Now 4 may wait, the rest are refused at
    once (503), and one whose wait passed its bound is refused without a lookup."""
    from streams.serve.readers import Overloaded

    pool = ReaderPool(lambda: object(), 1, max_waiting=4, max_wait_s=0.03)  # type: ignore[arg-type, return-value]
    looked_up: list[int] = []

    def slow(_: object, n: int) -> int:
        time.sleep(0.02)
        looked_up.append(n)
        return n

    async def main() -> list[object]:
        calls = [pool.run(lambda r, n=n: slow(r, n)) for n in range(200)]
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        results = asyncio.run(main())
    finally:
        pool.close()
    refused = [r for r in results if isinstance(r, Overloaded)]
    assert pool.refused_waiting == 195  # one running, four waiting: the rest at once
    assert pool.refused_late >= 1  # the last in line waited past 30 ms: no lookup for it
    assert len(refused) == 195 + pool.refused_late
    assert len(looked_up) == 5 - pool.refused_late and looked_up[0] == 0


def test_an_overloaded_server_answers_503_with_retry_after() -> None:
    """Every reader busy and no room to wait: 503 at once, with Retry-After and a JSON body."""
    store = InMemoryStore(clock_ms=lambda: T0)
    gate = threading.Event()

    async def main() -> None:
        pool = ReaderPool(lambda: _reader(store, 1_000.0), 1, max_waiting=0)
        pool.warm()
        metrics = ServeMetrics()
        app = build_app(pool, lambda: True, ServeOptions(DIM, MAX_ITEMS, "fm"), metrics)
        try:
            async with TestClient(TestServer(app)) as client:
                busy = asyncio.ensure_future(pool.run(lambda r: gate.wait(10)))
                await asyncio.sleep(0.05)
                resp = await client.post(FEATURES_PATH, json=REQUEST)
                assert resp.status == 503 and resp.headers["Retry-After"] == "1"
                assert (await resp.json())["error"] == "overloaded"
                gate.set()
                await busy
                assert (await client.post(FEATURES_PATH, json=REQUEST)).status == 200
        finally:
            gate.set()
            pool.close()

    asyncio.run(main())
