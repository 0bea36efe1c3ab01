"""Hypothesis: mutated stored values decode to a valid value or a corrupt verdict, never an error.

Mutations (byte flips, truncation, extension, splices of two values) of encoded pair, aggregate
and neighbour values (of records that may break the rules: any event time, NaN, infinity), half of them with the checksum recomputed (a buggy writer) so that the
content checks, not only the checksum, are exercised. Checked: the scalar decoders raise only ``CorruptValue``; whatever they
accept passes every content check; the vectorised ``decode_many`` agrees with the scalar
decoder value by value; ``FeatureReader.lookup`` over a store full of such values never raises
and serves only values the scalar decoder accepts.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from schemas.vectors import VectorDtype
from store.batch_decode import decode_many
from store.errors import CorruptValue
from store.keys import KeyLayout
from store.memory import InMemoryStore
from store.reader import FeatureReader
from store.tiers import Tier
from store.values import decode_neighbours, decode_vector, encode_aggregate, encode_neighbours
from store.values import encode_pair as encode_pair_value
from streams.engine.config import ENGINE_DEFAULTS

DIM = 8
T0 = 1_700_000_000_000
HOUR = 3_600_000
FUZZ = settings(
    max_examples=300,
    deadline=None,  # shared CI cores: wall time per example is not what is tested
    database=None,  # no .hypothesis/ directory in the repository
    suppress_health_check=[HealthCheck.too_slow],
)

# encoders do not validate: records that skipped validation carry any time and any float
times = st.one_of(
    st.integers(MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS - 1), st.integers(-(2**63), 2**63 - 1)
)
floats = st.one_of(
    st.floats(-60_000.0, 60_000.0, width=32),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
)
vectors = st.lists(floats, min_size=DIM, max_size=DIM).map(lambda v: np.array(v, np.float32))
dtypes = st.sampled_from(list(VectorDtype))


@st.composite
def encoded_values(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["pair", "aggregate", "neighbours"]))
    t = draw(times)
    if kind == "pair":
        rec = PairEmbedding.from_array(1, 2, t, "fm", draw(vectors), draw(dtypes))
        return encode_pair_value(rec)
    if kind == "aggregate":
        count = draw(st.integers(1, 2**32 - 1))
        agg = UserAggregate.from_array(1, t, HOUR, count, "fm", draw(vectors), draw(dtypes))
        return encode_aggregate(agg)
    ids = draw(st.lists(st.integers(0, 2**63 - 1), max_size=6))
    weights = draw(st.lists(floats, min_size=len(ids), max_size=len(ids)))
    return encode_neighbours(NeighbourList(1, t, tuple(ids), tuple(weights)))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(encoded_values()))
    op = draw(st.sampled_from(["flip", "set", "truncate", "extend", "splice", "none"]))
    if op in ("flip", "set") and raw:
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, len(raw) - 1))
            raw[pos] = (
                raw[pos] ^ (1 << draw(st.integers(0, 7)))
                if op == "flip"
                else draw(st.integers(0, 255))
            )
    elif op == "truncate":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif op == "extend":
        raw += draw(st.binary(min_size=1, max_size=16))
    elif op == "splice":
        other = draw(encoded_values())
        cut = draw(st.integers(0, min(len(raw), len(other))))
        raw = raw[:cut] + other[cut:]
    if draw(st.booleans()) and len(raw) > 4:  # a buggy writer: bad content, right checksum
        raw = raw[:-4] + struct.pack("<I", zlib.crc32(raw[:-4]))
    return bytes(raw)


def _scalar(raw: bytes) -> object:
    """What the scalar vector decoder says: a value, or the corrupt verdict."""
    try:
        return decode_vector(raw)
    except CorruptValue:
        return CorruptValue


@FUZZ
@given(mutated())
def test_scalar_decoders_accept_only_valid_values(raw: bytes) -> None:
    got = _scalar(raw)
    if got is not CorruptValue:
        assert isinstance(got, type(decode_vector(encode_pair_value(_any_pair()))))
        assert MIN_EVENT_TIME_MS <= got.event_time_ms < MAX_EVENT_TIME_MS
        assert np.isfinite(got.array()).all() and got.count >= 1
    try:
        nb = decode_neighbours(raw)
    except CorruptValue:
        return
    assert MIN_EVENT_TIME_MS <= nb.event_time_ms < MAX_EVENT_TIME_MS
    assert np.isfinite(nb.weights).all() and (nb.user_ids >= 0).all()


def _any_pair() -> PairEmbedding:
    return PairEmbedding.from_array(1, 2, T0, "fm", np.zeros(DIM, np.float32))


@FUZZ
@given(st.lists(st.one_of(st.none(), mutated()), max_size=12))
def test_decode_many_agrees_with_the_scalar_decoder(values: list[bytes | None]) -> None:
    got = decode_many(values, DIM)
    corrupt = 0
    for i, raw in enumerate(values):
        want = None if raw is None else _scalar(raw)
        if want is CorruptValue or (want is not None and want.dim != DIM):  # type: ignore[attr-defined]
            corrupt += 1
            want = None
        if want is None:
            assert not got.present[i] and not got.vectors[i].any()
            continue
        assert got.present[i]
        assert got.event_time_ms[i] == want.event_time_ms  # type: ignore[attr-defined]
        np.testing.assert_array_equal(got.vectors[i], want.array())  # type: ignore[attr-defined]
    assert got.corrupt == corrupt


@FUZZ
@given(st.lists(mutated(), min_size=1, max_size=6), mutated(), mutated())
def test_lookup_over_mutated_values_never_raises_nor_serves_corrupt(
    pairs: list[bytes], aggregate: bytes, neighbours: bytes
) -> None:
    store = InMemoryStore(KeyLayout("f"), clock_ms=lambda: T0)
    lay = store.layout
    items = list(range(len(pairs)))
    for i, raw in zip(items, pairs, strict=True):
        store._put(lay.pair(1, i), raw, HOUR)  # raw bytes: the encoders cannot make these
        store._put(lay.pair(2, i), raw, HOUR)
    store._put(lay.aggregate(1), aggregate, HOUR)
    store._put(lay.aggregate(2), aggregate, HOUR)
    store._put(lay.neighbours(1), neighbours, HOUR)
    reader = FeatureReader(
        store, replace(ENGINE_DEFAULTS.reader, dim=DIM, pair_ttl_ms=10**13, aggregate_ttl_ms=0)
    )
    vectors, tiers, _ = reader.lookup(1, items, MAX_EVENT_TIME_MS)  # every valid time is earlier
    assert reader.stats.internal_errors == 0
    assert np.isfinite(vectors).all()
    for j, raw in enumerate(pairs):
        if tiers[j] == Tier.EXACT:
            want = _scalar(raw)
            assert want is not CorruptValue
            np.testing.assert_array_equal(vectors[j], want.array())  # type: ignore[attr-defined]
