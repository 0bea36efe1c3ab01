"""Hypothesis: the Avro codec round-trips valid records near every validation bound, and a
mutated encoding either decodes to a valid record or raises a ``SchemaError``, nothing else.

Bounds come from :mod:`schemas.limits` and :mod:`schemas.validation`: event times at both ends
of ``[MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS)``, ids at 0 and ``2**63 - 1``, strings of 1 and
``max_string_len`` characters, lists empty and at their maximum size, dims of 1 and
``max_dim``, Avro ``int`` fields at their 32-bit ends, float16 values at +-65504.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.codec import Codec
from schemas.errors import SchemaError
from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, Limits
from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    NeighbourList,
    PairEmbedding,
    PairProposal,
    ProposalBatch,
    RequestEvent,
    UserAggregate,
)
from schemas.validation import validate
from schemas.vectors import VectorDtype

LIMITS = Limits()
CODEC = Codec(LIMITS)
FUZZ = settings(
    max_examples=600,
    deadline=None,  # shared CI cores: wall time per example is not what is tested
    database=None,  # no .hypothesis/ directory in the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
I64 = 2**63 - 1
I32 = 2**31 - 1


def near(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in ``[lo, hi]``, mostly at or next to either end."""
    edges = sorted({lo, min(lo + 1, hi), max(hi - 1, lo), hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


ids = near(0, I64)
times = near(MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS - 1)
sizes = near  # list sizes: the same edges
names = near(1, LIMITS.max_string_len).flatmap(
    lambda n: st.text(min_size=n, max_size=n, alphabet=st.characters(codec="utf-8"))
)
f32 = st.floats(allow_nan=False, allow_infinity=False, width=32)  # Avro float: exact round trip


def id_list(lo: int, hi: int) -> st.SearchStrategy[tuple[int, ...]]:
    """``n`` in ``[lo, hi]`` ids from one drawn base (cheap even at the maximum size)."""
    return st.tuples(sizes(lo, hi), ids).map(lambda p: tuple((p[1] + k) % I64 for k in range(p[0])))


@st.composite
def vector_bytes(draw: st.DrawFn, rows: int = 1) -> tuple[str, int, bytes]:
    dtype = draw(st.sampled_from(list(VectorDtype)))
    dim = draw(near(1, LIMITS.max_dim))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vec = rng.uniform(-65504.0, 65504.0, rows * dim).astype(np.float32)
    if vec.size:
        vec[0] = draw(st.sampled_from([65504.0, -65504.0, 0.0, -0.0, 6e-8]))
    return dtype.value, dim, vec.astype(dtype.numpy).tobytes()


@st.composite
def proposal_batches(draw: st.DrawFn) -> ProposalBatch:
    t = draw(times)
    items = draw(id_list(0, LIMITS.max_candidates + LIMITS.max_lookahead))
    n = len(items)
    h = draw(sizes(0, min(LIMITS.max_history, t - MIN_EVENT_TIME_MS)))
    start = draw(st.integers(max(MIN_EVENT_TIME_MS, -(2**62)), t - h)) if h else t
    verified = draw(st.booleans())
    return ProposalBatch(
        draw(names),
        draw(ids),
        t,
        draw(near(0, LIMITS.max_candidates)),
        items,
        tuple("s" for _ in range(n)),
        tuple(draw(st.lists(f32, min_size=n, max_size=n))) if verified and n < 64 else (),
        tuple(range(h)),
        tuple(k % 2 for k in range(h)),
        tuple(start + k for k in range(h)),  # sorted, strictly before the event time
    )


@st.composite
def embedding_batches(draw: st.DrawFn) -> EmbeddingBatch:
    n = draw(sizes(0, 4))
    dtype, dim, data = draw(vector_bytes(rows=n))
    items = tuple(range(n))
    return EmbeddingBatch(draw(names), draw(ids), draw(times), draw(names), dtype, dim, items, data)


@st.composite
def records(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 8))
    if kind == 0:
        cands = draw(id_list(0, LIMITS.max_candidates))
        return RequestEvent(draw(names), draw(ids), draw(times), draw(names), cands)
    if kind == 1:
        return ImpressionEvent(
            draw(names), draw(ids), draw(ids), draw(times), draw(near(0, I32)), draw(near(0, 1))
        )
    if kind == 2:
        score = draw(st.one_of(st.none(), f32))
        return PairProposal(draw(names), draw(ids), draw(ids), draw(times), draw(names), score)
    if kind in (3, 4):
        dtype, dim, data = draw(vector_bytes())
        if kind == 3:
            return PairEmbedding(draw(ids), draw(ids), draw(times), draw(names), dtype, dim, data)
        window, count = draw(near(1, I64)), draw(near(1, I32))
        return UserAggregate(draw(ids), draw(times), window, count, draw(names), dtype, dim, data)
    if kind == 5:
        nbs = draw(id_list(0, LIMITS.max_neighbours))
        weights = tuple(draw(st.lists(f32, min_size=len(nbs), max_size=len(nbs))))
        return NeighbourList(draw(ids), draw(times), nbs, weights)
    if kind == 6:
        raw = st.one_of(st.none(), st.binary(max_size=64))
        return DeadLetter(
            draw(st.text(max_size=40)),
            draw(near(-(2**31), I32)),
            draw(near(-(2**63), I64)),
            draw(st.text(max_size=40)),
            draw(st.text(max_size=200)),
            draw(raw),
            draw(raw),
            draw(near(-(2**63), I64)),
        )
    if kind == 7:
        return draw(proposal_batches())
    return draw(embedding_batches())


@FUZZ
@given(records())
def test_valid_records_near_every_bound_round_trip(rec: Any) -> None:
    validate(rec, LIMITS)  # the strategy makes valid records only
    assert CODEC.decode(CODEC.encode(rec), type(rec)) == rec


@st.composite
def mutations(draw: st.DrawFn) -> bytes:
    raw = bytearray(CODEC.encode(draw(records())))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "splice"]))
        pos = draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and raw:
            raw[pos] = draw(
                st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))])
            )
        elif op == "insert":
            raw[pos:pos] = draw(st.binary(min_size=1, max_size=9))
        elif op == "delete":
            del raw[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del raw[pos:]
        elif op == "splice":
            other = CODEC.encode(draw(records()))
            raw = raw[:pos] + bytearray(other[pos:])
    if draw(st.booleans()) and len(raw) >= 5:  # a header naming another (known) schema
        raw[:5] = struct.pack(">BI", 0, draw(st.integers(0, 10)))
    return bytes(raw)


@FUZZ
@given(mutations())
def test_mutated_encodings_decode_to_valid_records_or_raise_schema_error(raw: bytes) -> None:
    try:
        rec: Any = CODEC.decode(raw)
    except SchemaError:
        return
    validate(rec, LIMITS)  # what decodes is valid ...
    assert CODEC.decode(CODEC.encode(rec)) == rec  # ... and encodes again to the same record
