"""Stored-value encoding and key layout."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.errors import CorruptValue
from store.keys import KeyLayout
from store.values import (
    decode_neighbours,
    decode_vector,
    encode_aggregate,
    encode_neighbours,
    encode_pair,
    version_tag,
)

T0 = 1_700_000_000_000


def test_pair_value_is_compact() -> None:
    rec = PairEmbedding.from_array(1, 2, T0, "fm-1", np.ones(64, np.float32))
    raw = encode_pair(rec)
    assert len(raw) == 16 + 128
    got = decode_vector(raw)
    assert (got.event_time_ms, got.count, got.dim) == (T0, 1, 64)
    assert got.version_tag == version_tag("fm-1") != version_tag("fm-2")


def test_aggregate_value_carries_count() -> None:
    rec = UserAggregate.from_array(1, T0, 10, 7, "fm-1", np.ones(8, np.float32))
    assert decode_vector(encode_aggregate(rec)).count == 7


def test_neighbour_value_round_trip() -> None:
    got = decode_neighbours(encode_neighbours(NeighbourList(1, T0, (5, 6, 7), (0.9, 0.8, 0.1))))
    assert got.user_ids.tolist() == [5, 6, 7]
    assert got.event_time_ms == T0


@pytest.mark.parametrize("raw", [b"", b"\x09" * 20, b"\x01\x00\x04\x00" + b"\x00" * 12 + b"\x00"])
def test_corrupt_vector_values_raise(raw: bytes) -> None:
    with pytest.raises(CorruptValue):
        decode_vector(raw)


def test_corrupt_neighbour_values_raise() -> None:
    with pytest.raises(CorruptValue):
        decode_neighbours(b"\x03\x02\x00" + b"\x00" * 8)


def test_keys_share_hash_tag() -> None:
    lay = KeyLayout("p")
    assert lay.pair(3, 4) == b"p:{u3}:p:4"
    assert lay.pairs(3, [4, 5]) == [b"p:{u3}:p:4", b"p:{u3}:p:5"]
    assert lay.aggregate(3) == b"p:{u3}:agg"
    assert lay.neighbours(3) == b"p:{u3}:nb"
