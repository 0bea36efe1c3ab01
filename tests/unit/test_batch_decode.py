"""decode_many: the reader's vectorised decode agrees with the per-value decoder on every layout."""

from __future__ import annotations

import numpy as np

from schemas.records import PairEmbedding, UserAggregate
from schemas.vectors import VectorDtype
from store.batch_decode import decode_many, decode_rows
from store.values import decode_vector, encode_aggregate, encode_pair, version_tag

T0 = 1_700_000_000_000
DIM = 8


def _pair(i: int, dtype: VectorDtype = VectorDtype.FLOAT16) -> bytes:
    vec = np.random.default_rng(i).normal(size=DIM).astype(np.float32)
    return encode_pair(PairEmbedding.from_array(1, i, T0 + i, "fm", vec, dtype))


def test_mixed_layouts_match_the_scalar_decoder() -> None:
    agg = encode_aggregate(UserAggregate.from_array(1, T0, 10, 3, "fm", np.ones(DIM, np.float32)))
    values = [_pair(0), None, _pair(2, VectorDtype.FLOAT32), agg, _pair(4)]
    got = decode_many(values, DIM)
    assert got.present.tolist() == [True, False, True, True, True]
    assert got.corrupt == 0
    for i, raw in enumerate(values):
        if raw is None:
            assert not got.vectors[i].any() and got.event_time_ms[i] == 0
            continue
        want = decode_vector(raw)
        np.testing.assert_array_equal(got.vectors[i], want.array())
        assert got.event_time_ms[i] == want.event_time_ms
        assert got.version_tag[i] == version_tag("fm")


def test_corrupt_and_wrong_dim_values_are_counted_and_absent() -> None:
    other_dim = encode_pair(PairEmbedding.from_array(1, 9, T0, "fm", np.ones(DIM * 2, np.float32)))
    values = [b"\x01\x00", _pair(1)[:-3], other_dim, _pair(3), b"\x09" * (16 + 2 * DIM)]
    got = decode_many(values, DIM)
    assert got.present.tolist() == [False, False, False, True, False]
    assert got.corrupt == 4


def test_float16_decode_is_exact_for_special_values() -> None:
    vec = np.array([0.0, -0.0, 65504.0, -65504.0, 6e-8, 1.0, -2.5, 0.333], np.float32)
    raw = encode_pair(PairEmbedding.from_array(1, 1, T0, "fm", vec))
    got = decode_many([raw], DIM)
    np.testing.assert_array_equal(got.vectors[0], vec.astype(np.float16).astype(np.float32))


def test_empty_input() -> None:
    got = decode_many([], DIM)
    assert got.vectors.shape == (0, DIM) and got.corrupt == 0


def _bad_pair(t: int, x: float) -> bytes:
    return encode_pair(PairEmbedding.from_array(1, 1, t, "fm", np.full(DIM, x, np.float32)))


def test_fast_path_rejects_what_the_scalar_decoder_rejects() -> None:
    # every value below has the fast layout's length and a valid checksum
    values = [
        _bad_pair(-(2**63), 1.0),  # INT64_MIN event time
        _bad_pair(2**62, 1.0),  # far past year 2200
        _bad_pair(T0, float("nan")),
        _bad_pair(T0, float("inf")),
        _bad_pair(T0, 0.5),  # the only good one
    ]
    got = decode_many(values, DIM)
    assert got.present.tolist() == [False, False, False, False, True]
    assert got.corrupt == 4
    assert not got.vectors[:4].any() and (got.event_time_ms[:4] == 0).all()


def test_a_flipped_bit_anywhere_makes_the_value_corrupt() -> None:
    good = _pair(1)
    values: list[bytes | None] = []
    for pos in range(len(good)):
        raw = bytearray(good)
        raw[pos] ^= 0x01
        values.append(bytes(raw))
    got = decode_many(values, DIM)
    assert got.corrupt == len(good) and not got.present.any()


def _pair_of(vec: list[float]) -> bytes:
    return encode_pair(PairEmbedding.from_array(1, 1, T0, "fm", np.array(vec, np.float32)))


def test_one_non_finite_element_rejects_only_its_row() -> None:
    big = [65504.0] * DIM  # the largest float16s: their row sum stays finite, so it is served
    one_inf = [0.5] * (DIM - 1) + [float("inf")]
    both_infs = [float("inf"), float("-inf")] + [0.0] * (DIM - 2)  # sums to NaN
    got = decode_many([_pair_of(big), _pair_of(one_inf), _pair_of(both_infs)], DIM)
    assert got.present.tolist() == [True, False, False] and got.corrupt == 2
    np.testing.assert_array_equal(got.vectors[0], np.float32(65504.0))


def test_decode_rows_is_the_compact_form_of_decode_many() -> None:
    agg = encode_aggregate(UserAggregate.from_array(1, T0, 10, 3, "fm", np.ones(DIM, np.float32)))
    values = [None, _pair(1, VectorDtype.FLOAT32), _pair(2), b"junk", agg, None, _pair(6)]
    rows = decode_rows(values, DIM)
    full = decode_many(values, DIM)
    assert rows.index.tolist() == [1, 2, 4, 6] == np.flatnonzero(full.present).tolist()
    assert rows.corrupt == full.corrupt == 1
    np.testing.assert_array_equal(rows.vectors, full.vectors[rows.index])
    np.testing.assert_array_equal(rows.event_time_ms, full.event_time_ms[rows.index])
    np.testing.assert_array_equal(rows.version_tag, full.version_tag[rows.index])
    assert decode_rows([None, None], DIM).index.tolist() == []


def _agg(i: int, count: int = 3, dim: int = DIM) -> bytes:
    vec = np.random.default_rng(100 + i).normal(size=dim).astype(np.float32)
    return encode_aggregate(UserAggregate.from_array(1, T0 + i, 10, count, "fm", vec))


def test_aggregates_decode_in_bulk_like_the_scalar_decoder() -> None:
    aggs = [_agg(i) for i in range(5)]
    for values in (aggs, [*aggs, _pair(7)], [None, *aggs[:2]]):
        got = decode_many(values, DIM)
        assert got.corrupt == 0 and got.present.tolist() == [v is not None for v in values]
        for i, raw in enumerate(values):
            if raw is not None:
                want = decode_vector(raw)
                np.testing.assert_array_equal(got.vectors[i], want.array())
                assert got.event_time_ms[i] == want.event_time_ms


def test_bulk_aggregate_checks_match_the_scalar_decoder() -> None:
    # count 0 is corrupt; a pair of dim + 2 has an aggregate's length but another layout
    values = [_agg(0), _agg(1, count=0), _pair_of_dim(DIM + 2), _agg(3)]
    got = decode_many(values, DIM)
    assert got.present.tolist() == [True, False, False, True] and got.corrupt == 2


def _pair_of_dim(dim: int) -> bytes:
    return encode_pair(PairEmbedding.from_array(1, 1, T0, "fm", np.ones(dim, np.float32)))
