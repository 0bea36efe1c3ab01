"""The stored history value (a fair VM's streaming features): round trip and the decoder's guards."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from store.errors import CorruptValue
from store.history_values import FORMAT_HISTORY, decode_history, encode_history

T0 = 1_700_000_000_000


def _sealed(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def test_round_trip_keeps_entries_in_order() -> None:
    entries = [(5, 1, T0), (7, 0, T0 + 10), (5, 0, T0 + 10), (2**40, 1, T0 + 99)]
    got = decode_history(encode_history(entries))
    assert got.items.tolist() == [5, 7, 5, 2**40]
    assert got.labels.tolist() == [1, 0, 0, 1]
    assert got.times_ms.tolist() == [T0, T0 + 10, T0 + 10, T0 + 99]
    assert got.items.dtype == np.int64 and got.labels.dtype == np.int8 and len(got) == 4


def test_empty_history_round_trips() -> None:
    assert len(decode_history(encode_history([]))) == 0


@pytest.mark.parametrize(
    ("entries", "what"),
    [
        ([(1, 2, T0)], "label 2"),
        ([(-1, 1, T0)], "negative item"),
        ([(1, 1, T0 + 5), (2, 1, T0)], "time order"),
        ([(1, 1, 5)], "time out of bounds"),
    ],
)
def test_decoder_refuses_values_no_agent_writes(
    entries: list[tuple[int, int, int]], what: str
) -> None:
    arr = np.asarray(entries, np.int64)
    body = (
        struct.pack("<BH", FORMAT_HISTORY, len(entries))
        + arr[:, 0].astype("<i8").tobytes()
        + arr[:, 1].astype("i1").tobytes()
        + arr[:, 2].astype("<i8").tobytes()
    )
    with pytest.raises(CorruptValue):
        decode_history(_sealed(body))


def test_flipped_byte_and_truncation_are_corrupt() -> None:
    raw = bytearray(encode_history([(5, 1, T0), (6, 0, T0 + 1)]))
    raw[5] ^= 0x10
    with pytest.raises(CorruptValue, match="checksum"):
        decode_history(bytes(raw))
    with pytest.raises(CorruptValue):
        decode_history(encode_history([(5, 1, T0)])[:-6])
    with pytest.raises(CorruptValue):
        decode_history(b"")
