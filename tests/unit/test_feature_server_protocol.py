"""``solaris serve``'s wire protocol, pure: request parsing and validation, the Accept header,
the binary answer's layout and round trip, and the JSON answer."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from store.reader import Lookup
from store.tiers import TIER_NAMES, Tier
from streams.serve.protocol import (
    HEADER,
    BadRequest,
    decode_binary,
    encode_binary,
    json_answer,
    max_body_bytes,
    parse_request,
    wants_binary,
)

T0 = 1_700_000_000_000
HOUR = 3_600_000
DIM = 8
MAX_ITEMS = 5


def _body(**fields: Any) -> bytes:
    doc = {"user_id": 1, "item_ids": [10, 11], "event_time_ms": T0}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


# --- request parsing ---------------------------------------------------------------------------


def test_parse_a_good_request() -> None:
    req = parse_request(_body(user_id=2**63 - 1, item_ids=[0, 5]), MAX_ITEMS)
    assert (req.user_id, req.item_ids, req.event_time_ms) == (2**63 - 1, [0, 5], T0)
    assert parse_request(_body(item_ids=[]), MAX_ITEMS).item_ids == []


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        (b"{not json", None, "not JSON"),
        (b"[1, 2]", None, "JSON object"),
        (_body(item_ids=...), "item_ids", "missing"),
        (_body(user_id=..., event_time_ms=...), "user_id", "user_id, event_time_ms"),
        (_body(item_ids=list(range(MAX_ITEMS + 1))), "item_ids", f"more than {MAX_ITEMS}"),
        (_body(user_id="1"), "user_id", "integer"),
        (_body(user_id=1.0), "user_id", "integer"),
        (_body(user_id=True), "user_id", "integer"),
        (_body(user_id=-1), "user_id", "[0,"),
        (_body(user_id=2**63), "user_id", "[0,"),
        (_body(item_ids="10,11"), "item_ids", "list"),
        (_body(item_ids=[10, "x"]), "item_ids[1]", "integer"),
        (_body(item_ids=[10, None]), "item_ids[1]", "integer"),
        (_body(event_time_ms=MIN_EVENT_TIME_MS - 1), "event_time_ms", "must be in"),
        (_body(event_time_ms=MAX_EVENT_TIME_MS), "event_time_ms", "must be in"),
    ],
)
def test_bad_requests_say_what_and_where(body: bytes, field: str | None, says: str) -> None:
    with pytest.raises(BadRequest) as err:
        parse_request(body, MAX_ITEMS)
    assert err.value.field == field
    assert says in err.value.message
    assert err.value.body() == {
        "error": "bad_request",
        "message": err.value.message,
        "field": field,
    }


def test_deeply_nested_body_is_a_bad_request_not_a_crash() -> None:
    """``[[[[...`` made the JSON decoder recurse past Python's limit: a RecursionError and a
    500 with a traceback on every such request. Now a 400."""
    with pytest.raises(BadRequest):
        parse_request(b"[" * 100_000, 1000)  # refused by its size, before the parser
    with pytest.raises(BadRequest, match="nests too deep"):
        parse_request(b"[" * 20_000, 1000)  # within the size bound: by its depth
    with pytest.raises(BadRequest, match="nests too deep"):
        parse_request(b'{"user_id": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", 5000)


def test_a_body_larger_than_any_request_is_refused_before_parsing() -> None:
    biggest = json.dumps(
        {"user_id": 2**63 - 1, "item_ids": [2**63 - 1] * 1000, "event_time_ms": T0}, indent=2
    ).encode()
    assert len(biggest) <= max_body_bytes(1000)
    assert parse_request(biggest, 1000).item_ids[-1] == 2**63 - 1
    with pytest.raises(BadRequest, match="bytes, more than"):
        parse_request(b" " * (max_body_bytes(1000) + 1), 1000)


@pytest.mark.parametrize(
    ("accept", "binary"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("application/json", False),
        ("application/octet-stream", True),
        ("Application/Octet-Stream", True),
        ("application/octet-stream;q=0.5, application/json", False),
        ("application/json;q=0.2, application/octet-stream", True),
        ("application/octet-stream, application/json", True),
        ("application/octet-stream;q=0", False),
        ("application/octet-stream;q=bogus", False),
    ],
)
def test_accept_header_picks_the_form(accept: str | None, binary: bool) -> None:
    assert wants_binary(accept) is binary


# --- encodings ---------------------------------------------------------------------------------


def _lookup(n: int, seed: int = 0) -> Lookup:
    rng = np.random.default_rng(seed)
    tiers = rng.integers(0, len(Tier), n).astype(np.uint8)
    ages = np.where(tiers == Tier.MISSING, -1, rng.integers(0, 10 * HOUR, n)).astype(np.int64)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors[tiers == Tier.MISSING] = 0.0
    return Lookup(vectors, tiers, ages)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 100])
def test_binary_round_trip_and_layout(n: int) -> None:
    found = _lookup(n, seed=n)
    data = encode_binary(found, DIM, None)
    pad = (-n) % 8
    assert len(data) == HEADER.size + n + pad + 8 * n + 4 * n * DIM
    assert data[:16] == b"SOLF" + (1).to_bytes(2, "little") + bytes(2) + n.to_bytes(
        4, "little"
    ) + DIM.to_bytes(4, "little")
    assert data[16 : 16 + n] == found.tiers.tobytes()
    ages_at = 16 + n + pad
    assert ages_at % 8 == 0  # typed-array views (BigInt64Array) need aligned offsets
    assert data[ages_at : ages_at + 8 * n] == found.ages_ms.astype("<i8").tobytes()
    back, failed = decode_binary(data)
    assert not failed
    np.testing.assert_array_equal(back.tiers, found.tiers)
    np.testing.assert_array_equal(back.ages_ms, found.ages_ms)
    np.testing.assert_array_equal(back.vectors, found.vectors)  # bit-exact float32
    assert back.vectors.shape == (n, DIM) and back.vectors.dtype == np.float32


def test_binary_flag_and_malformed_bodies() -> None:
    data = encode_binary(_lookup(3), DIM, "timeout")
    assert int.from_bytes(data[6:8], "little") == 1 and decode_binary(data).read_failed
    for bad in (data[:10], data[:-1], b"XXXX" + data[4:], data + b"\0"):
        with pytest.raises(ValueError):
            decode_binary(bad)


def test_json_answer_names_tiers_and_keeps_float32_values() -> None:
    found = _lookup(6, seed=3)
    doc = json.loads(json.dumps(json_answer(found, DIM, "fm-1", None)))
    assert doc["tiers"] == [TIER_NAMES[c] for c in found.tiers.tolist()]
    assert doc["tier_codes"] == found.tiers.tolist()
    assert doc["ages_ms"] == found.ages_ms.tolist()
    assert (doc["n"], doc["dim"], doc["model_version"], doc["read_error"]) == (6, DIM, "fm-1", None)
    np.testing.assert_array_equal(np.asarray(doc["vectors"], np.float32), found.vectors)


# --- the application ---------------------------------------------------------------------------
