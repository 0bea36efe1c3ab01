"""Issue 24: a dead letter of a message near the broker's size limit must still be sendable."""

from __future__ import annotations

import hashlib

from schemas.codec import Codec
from schemas.records import DeadLetter
from streams.live.dead_letters import (
    MAX_RAW_KEY_BYTES,
    MAX_RAW_VALUE_BYTES,
    Origin,
    bounded_raw,
    dead_letter_for,
)

#: librdkafka's default message.max.bytes: a dead letter over it is refused by the producer
LIBRDKAFKA_MAX = 1_000_000


def test_a_near_limit_poison_message_makes_a_sendable_dead_letter() -> None:
    value = bytes(range(256)) * 4_064  # 1,040,384 bytes: the broker takes it, as in the issue
    dl = dead_letter_for(Origin("requests", 3, 17), b"k" * 40_000, value, "bad_header", "boom")
    encoded = Codec().encode(dl)
    assert len(encoded) < LIBRDKAFKA_MAX
    assert dl.raw_value == value[:MAX_RAW_VALUE_BYTES]
    assert dl.raw_key == b"k" * MAX_RAW_KEY_BYTES
    assert dl.error.startswith("boom ")
    assert f"{MAX_RAW_VALUE_BYTES} of {len(value)} bytes" in dl.error
    assert hashlib.sha256(value).hexdigest() in dl.error
    assert f"{MAX_RAW_KEY_BYTES} of 40000 bytes" in dl.error
    assert Codec().decode(encoded, DeadLetter) == dl


def test_messages_that_fit_are_kept_whole_without_a_note() -> None:
    dl = dead_letter_for(Origin("requests", 0, 1), b"7", b"x" * 499_500, "bad_header", "e")
    assert dl.raw_value == b"x" * 499_500 and dl.error == "e"
    assert bounded_raw(None, 1, "value") == (None, "")
    assert bounded_raw(b"ab", 2, "value") == (b"ab", "")
