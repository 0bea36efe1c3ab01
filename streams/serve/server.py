"""The feature server's aiohttp application and its runner.

``POST /v1/features`` answers one :meth:`FeatureReader.lookup` (on a worker thread with its own
reader: :mod:`streams.serve.readers`), encoded as JSON or, for ``Accept:
application/octet-stream``, in the binary form of :mod:`streams.serve.protocol`; the encoding is
done on the worker thread too, so the event loop only moves bytes. ``GET /healthz`` pings the
store, ``GET /metrics`` is Prometheus text, ``GET /openapi.json`` the OpenAPI document. Every
error answer is JSON ``{"error", "message", "field"}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from store.reader import FeatureReader, StateDecoder
from store.tiers import TIER_NAMES
from store.urls import redact_url
from streams.logs import announce
from streams.serve.metrics import ServeMetrics
from streams.serve.openapi import FEATURES_PATH, openapi_document
from streams.serve.protocol import (
    BINARY_TYPE,
    BadRequest,
    encode_binary,
    encode_json,
    json_answer,
    parse_request,
    wants_binary,
)
from streams.serve.readers import Overloaded, ReaderPool, Served, timed_lookup
from streams.settings import Settings

log = logging.getLogger(__name__)
#: largest request body (ids as JSON text: 1 000 ids of 19 digits are ~20 KiB)
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ServeOptions:
    dim: int
    max_items: int
    #: the only FM version served (the reader is gated on it); None = any
    model_version: str | None


@dataclass(frozen=True, slots=True)
class Server:
    """What the handlers share."""

    pool: ReaderPool
    ping: Callable[[], bool]
    options: ServeOptions
    metrics: ServeMetrics
    openapi: bytes


def _error(status: int, error: str, message: str, field: str | None = None) -> web.Response:
    body = {"error": error, "message": message, "field": field}
    return web.json_response(body, status=status)


def _encode(served: Served, binary: bool, opts: ServeOptions) -> bytes:
    if binary:
        return encode_binary(served.found, opts.dim, served.read_error)
    return encode_json(json_answer(served.found, opts.dim, opts.model_version, served.read_error))


async def _features(srv: Server, request: web.Request) -> web.Response:
    t0 = time.perf_counter()
    binary = wants_binary(request.headers.get("Accept"))
    fmt = "binary" if binary else "json"
    status = 500
    try:
        req = parse_request(await request.read(), srv.options.max_items)

        def work(reader: FeatureReader) -> tuple[Served, bytes]:
            served = timed_lookup(reader, req.user_id, req.item_ids, req.event_time_ms)
            return served, _encode(served, binary, srv.options)

        served, body = await srv.pool.run(work)
        srv.metrics.observe_lookup(served.found.tiers.tolist(), served.seconds, served.read_error)
        headers = {"X-Solaris-Read-Error": served.read_error or ""}
        if binary:
            headers["X-Solaris-Tier-Names"] = ",".join(TIER_NAMES)
        if srv.options.model_version is not None:
            headers["X-Solaris-Model-Version"] = srv.options.model_version
        ctype = BINARY_TYPE if binary else "application/json"
        status = 200
        return web.Response(body=body, content_type=ctype, headers=headers)
    except BadRequest as exc:
        status = 400
        return web.json_response(exc.body(), status=400)
    except Overloaded as exc:  # fast, so the client can go elsewhere or serve without features
        status = 503
        response = _error(503, "overloaded", str(exc))
        response.headers["Retry-After"] = "1"
        return response
    except web.HTTPException as exc:  # e.g. 413 from reading an oversized body
        status = exc.status
        return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.text or exc.reason)
    except Exception:
        log.exception("feature request failed")
        return _error(500, "internal_error", "the server failed on this request (logged)")
    finally:
        srv.metrics.observe_request(status, fmt, time.perf_counter() - t0)


async def _health(srv: Server, request: web.Request) -> web.Response:
    try:
        reachable = bool(await asyncio.get_running_loop().run_in_executor(None, srv.ping))
    except Exception:  # a failing ping means "store down", never a crashed probe
        log.warning("store ping failed", exc_info=True)
        reachable = False
    body = {"live": True, "store_reachable": reachable}
    return web.json_response(body, status=200 if reachable else 503)


@web.middleware
async def _json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Routing errors (404, 405) as JSON bodies too."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)


def build_app(
    pool: ReaderPool, ping: Callable[[], bool], options: ServeOptions, metrics: ServeMetrics
) -> web.Application:
    """The application; closing it (``on_cleanup``) does not close ``pool`` (the caller's)."""
    doc = openapi_document(options.max_items, options.dim)
    srv = Server(pool, ping, options, metrics, json.dumps(doc, indent=1).encode())
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_json_errors])

    async def features(request: web.Request) -> web.Response:
        return await _features(srv, request)

    async def health(request: web.Request) -> web.Response:
        return await _health(srv, request)

    async def metrics_(request: web.Request) -> web.Response:
        body = srv.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi(request: web.Request) -> web.Response:
        return web.Response(body=srv.openapi, content_type="application/json")

    app.router.add_post(FEATURES_PATH, features)
    app.router.add_get("/healthz", health)
    app.router.add_get("/metrics", metrics_)
    app.router.add_get("/openapi.json", openapi)
    return app


@dataclass(frozen=True, slots=True)
class ServedModel:
    """What the served bundle decides: the vector dim, the only FM version served (None =
    any) and the state tier's decoder (None = no state tier)."""

    dim: int
    version: str | None
    states: StateDecoder | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ServedModel:
        return cls(settings.embedding_dim, settings.serve_model_version or None)


def serve_forever(
    settings: Settings,
    host: str,
    port: int,
    echo: Callable[..., None] = announce,
    model: ServedModel | None = None,
) -> None:
    """Open the store (one per worker thread, one for ``/healthz``), warm every reader, then
    serve until SIGINT/SIGTERM; closes everything on the way out. A ``model`` with a decoder
    also serves the state tier (one decoder shared by the threads: its runner keeps no state
    and onnxruntime sessions run concurrently). The banner goes to ``echo(message, **fields)``
    (default :func:`streams.logs.announce`: a JSON record when logs are JSON)."""
    from streams.engine.config import reader_config
    from streams.stores import store_from_settings

    served = model or ServedModel.from_settings(settings)
    dim, version, states = served.dim, served.version, served.states
    rcfg = reader_config(settings, dim, version)
    pool = ReaderPool(
        lambda: FeatureReader(store_from_settings(settings), rcfg, states=states),
        settings.serve_threads,
        max_waiting=settings.serve_max_waiting,
        max_wait_s=settings.serve_max_wait_ms / 1000,
    )
    health_store = store_from_settings(settings)
    try:
        pool.warm()
        options = ServeOptions(dim, settings.max_candidates, version)
        app = build_app(pool, health_store.ping, options, ServeMetrics())
        where = redact_url(settings.store_url) if settings.store_backend != "aerospike" else ""
        url = f"http://{host}:{port}{FEATURES_PATH}"
        echo(
            f"feature server: {url} ({settings.store_backend} "
            f"{where}, {settings.serve_threads} readers, deadline {rcfg.deadline_ms:g} ms, "
            f"dim {options.dim}, model version {version or 'any'}, "
            f"state tier {'on' if states is not None else 'off'})",
            url=url,
            store_backend=settings.store_backend,
            store=where,
            readers=settings.serve_threads,
            deadline_ms=rcfg.deadline_ms,
            dim=options.dim,
            model_version=version,
            state_tier=states is not None,
        )
        web.run_app(app, host=host, port=port, print=None, access_log=None, shutdown_timeout=2.0)
    finally:
        pool.close()
        health_store.close()
