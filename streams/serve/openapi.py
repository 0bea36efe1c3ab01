"""The feature server's OpenAPI 3.1 document (``GET /openapi.json``), built from the same
limits and tier names the server uses, so it cannot drift from them. Its component schemas are
JSON Schema 2020-12 (OpenAPI 3.1's dialect): the tests validate real answers against them."""

from __future__ import annotations

from typing import Any

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from store.tiers import TIER_NAMES
from streams.serve import protocol
from streams.serve.protocol import (
    BINARY_TYPE,
    FORMAT_VERSION,
    JSON_TYPE,
    MAX_ID,
    READ_ERRORS,
)

FEATURES_PATH = "/v1/features"


def _binary_layout() -> str:
    """The binary layout table of :mod:`streams.serve.protocol`'s docstring."""
    doc = protocol.__doc__ or ""
    return doc[doc.index("Answer, binary") :].strip()


def _schemas(max_items: int, dim: int) -> dict[str, Any]:
    item_id = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
    return {
        "FeatureRequest": {
            "type": "object",
            "required": ["user_id", "item_ids", "event_time_ms"],
            "properties": {
                "user_id": item_id,
                "item_ids": {"type": "array", "items": item_id, "maxItems": max_items},
                "event_time_ms": {
                    "type": "integer",
                    "minimum": MIN_EVENT_TIME_MS,
                    "maximum": MAX_EVENT_TIME_MS - 1,
                    "description": "The request's event time: freshness is judged against it.",
                },
            },
        },
        "FeatureResponse": {
            "type": "object",
            "required": ["n", "dim", "tiers", "tier_codes", "ages_ms", "vectors"],
            "properties": {
                "n": {"type": "integer", "minimum": 0, "maximum": max_items},
                "dim": {"type": "integer", "const": dim},
                "tiers": {"type": "array", "items": {"enum": list(TIER_NAMES)}},
                "tier_codes": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 0, "maximum": len(TIER_NAMES) - 1},
                    "description": "Tier codes (index into the tier names: "
                    + ", ".join(f"{k} {n}" for k, n in enumerate(TIER_NAMES))
                    + ").",
                },
                "ages_ms": {"type": "array", "items": {"type": "integer", "minimum": -1}},
                "vectors": {
                    "type": "array",
                    "items": {
                        "type": "array",
                        "items": {"type": "number"},
                        "minItems": dim,
                        "maxItems": dim,
                    },
                },
                "model_version": {"type": ["string", "null"]},
                "read_error": {"enum": [None, *READ_ERRORS]},
            },
        },
        "Health": {
            "type": "object",
            "required": ["live", "store_reachable"],
            "properties": {"live": {"type": "boolean"}, "store_reachable": {"type": "boolean"}},
        },
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {
                "error": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": ["string", "null"]},
            },
        },
    }


def _ref(name: str) -> dict[str, Any]:
    return {"schema": {"$ref": f"#/components/schemas/{name}"}}


def _features_operation() -> dict[str, Any]:
    return {
        "operationId": "getFeatures",
        "summary": "Tiered FM embeddings of the candidates for one user, as of an event time.",
        "description": "One FeatureReader lookup with the server's read deadline. JSON by "
        f"default; `Accept: {BINARY_TYPE}` for the compact form.",
        "requestBody": {"required": True, "content": {JSON_TYPE: _ref("FeatureRequest")}},
        "responses": {
            "200": {
                "description": "One row per item, in request order.",
                "content": {
                    JSON_TYPE: _ref("FeatureResponse"),
                    BINARY_TYPE: {
                        "schema": {
                            "type": "string",
                            "format": "binary",
                            "description": _binary_layout(),
                        },
                        "x-solaris-format-version": FORMAT_VERSION,
                    },
                },
            },
            "400": {
                "description": "Bad request (the body says why and names the field).",
                "content": _ref_json("Error"),
            },
            "413": {"description": "Body too large.", "content": _ref_json("Error")},
        },
    }


def openapi_document(max_items: int, dim: int) -> dict[str, Any]:
    """The document for a server with these limits."""
    text = {"text/plain": {"schema": {"type": "string"}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "SOLARIS feature server",
            "version": "1",
            "description": "FM interaction embeddings and their coverage tiers for a ranker.",
        },
        "paths": {
            FEATURES_PATH: {"post": _features_operation()},
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "summary": "Live, and whether the store answers a ping.",
                    "responses": {
                        "200": {"description": "Store reachable.", "content": _ref_json("Health")},
                        "503": {"description": "Store down.", "content": _ref_json("Health")},
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics (text exposition format).",
                    "responses": {"200": {"description": "Metrics.", "content": text}},
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.1 document."}},
                }
            },
        },
        "components": {"schemas": _schemas(max_items, dim)},
    }


def _ref_json(name: str) -> dict[str, Any]:
    return {JSON_TYPE: _ref(name)}
