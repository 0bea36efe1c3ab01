"""Stored-value encoding and key layout."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.errors import CorruptValue
from store.keys import KeyLayout
from store.values import (
    FORMAT_PAIR,
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
    assert len(raw) == 16 + 128 + 4  # header + float16 vector + CRC32
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


def _reseal(body: bytes) -> bytes:
    """A value whose checksum is right for ``body``: only the content checks can reject it."""
    return body + struct.pack("<I", zlib.crc32(body))


def _pair_raw(t: int = T0, x: float = 1.0) -> bytes:
    return encode_pair(PairEmbedding.from_array(1, 2, t, "fm-1", np.full(8, x, np.float32)))


@pytest.mark.parametrize("pos", [0, 1, 3, 7, 16, 20, -5, -1])
def test_any_flipped_byte_is_caught_by_the_checksum(pos: int) -> None:
    raw = bytearray(_pair_raw())
    raw[pos] ^= 0x10
    with pytest.raises(CorruptValue):
        decode_vector(bytes(raw))


@pytest.mark.parametrize(
    ("t", "x"),
    [(-(2**63), 1.0), (2**63 - 1, 1.0), (0, 1.0), (T0, float("nan")), (T0, float("-inf"))],
)
def test_sealed_values_with_bad_content_are_corrupt(t: int, x: float) -> None:
    with pytest.raises(CorruptValue):
        decode_vector(_pair_raw(t, x))


def test_version_1_values_are_rejected_not_misread() -> None:
    body = _pair_raw()[:-4]
    old = _reseal(bytes([1]) + body[1:])  # version-1 format byte, even with a valid checksum
    assert body[0] == FORMAT_PAIR != 1
    with pytest.raises(CorruptValue, match="format byte"):
        decode_vector(old)


@pytest.mark.parametrize(
    "rec",
    [
        NeighbourList(1, -(2**63), (5,), (0.9,)),
        NeighbourList(1, T0, (5,), (float("nan"),)),
        NeighbourList(1, T0, (-5,), (0.5,)),
    ],
)
def test_neighbour_values_with_bad_content_are_corrupt(rec: NeighbourList) -> None:
    with pytest.raises(CorruptValue):
        decode_neighbours(encode_neighbours(rec))


def test_keys_share_hash_tag() -> None:
    lay = KeyLayout("p")
    assert lay.pair(3, 4) == b"p:{u3}:p:4"
    assert lay.pairs(3, [4, 5]) == [b"p:{u3}:p:4", b"p:{u3}:p:5"]
    assert lay.aggregate(3) == b"p:{u3}:agg"
    assert lay.neighbours(3) == b"p:{u3}:nb"
