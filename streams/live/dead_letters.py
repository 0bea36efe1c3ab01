"""Decode-or-dead-letter: every consumer turns undecodable/invalid messages into a DeadLetter.

The dead letter keeps the raw key and value bytes and where they came from (topic, partition,
offset) with a reason code, so nothing is lost and a fixed consumer can re-process them.

A poison message near the broker's size limit (1,048,588 bytes by default) would make a dead
letter librdkafka refuses (``MSG_SIZE_TOO_LARGE`` over its 1,000,000-byte ``message.max.bytes``):
the send fails, the agent crashes, and Faust acks the batch it was in (issue 24: 44 of 200 valid
requests lost). So raw bytes are kept up to :data:`MAX_RAW_VALUE_BYTES` /
:data:`MAX_RAW_KEY_BYTES`; a longer one keeps that prefix, and its error text names the original
size and the SHA-256 of the whole, so the original can still be found in the source partition
(``topic``, ``partition``, ``offset``) and checked.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TypeVar

from schemas.codec import Codec
from schemas.errors import SchemaError
from schemas.records import DeadLetter
from streams.live.metrics import DEAD_LETTERS

log = logging.getLogger(__name__)
T = TypeVar("T")
#: raw value bytes a dead letter keeps: well under librdkafka's 1,000,000-byte message limit
MAX_RAW_VALUE_BYTES = 512 * 1024
#: raw key bytes a dead letter keeps
MAX_RAW_KEY_BYTES = 16 * 1024


def bounded_raw(raw: bytes | None, limit: int, what: str) -> tuple[bytes | None, str]:
    """``raw`` cut to its first ``limit`` bytes, and a note saying so ("" when it fits)."""
    if raw is None or len(raw) <= limit:
        return raw, ""
    digest = hashlib.sha256(raw).hexdigest()
    return raw[:limit], (
        f"[raw {what} cut to its first {limit} of {len(raw)} bytes; sha256 of all {digest}]"
    )


@dataclass(frozen=True, slots=True)
class Origin:
    topic: str
    partition: int
    offset: int


def dead_letter_for(
    origin: Origin, key: bytes | None, value: bytes | None, reason: str, error: str
) -> DeadLetter:
    DEAD_LETTERS.labels(origin.topic, reason).inc()
    log.warning(  # the text too: Faust's worker log format drops the extra fields
        "dead letter %s[%d]@%d %s: %s",
        origin.topic,
        origin.partition,
        origin.offset,
        reason,
        error[:200],
        extra={
            "topic": origin.topic,
            "partition": origin.partition,
            "offset": origin.offset,
            "reason": reason,
            "error": error[:200],
        },
    )
    key, key_note = bounded_raw(key, MAX_RAW_KEY_BYTES, "key")
    value, value_note = bounded_raw(value, MAX_RAW_VALUE_BYTES, "value")
    notes = " ".join(n for n in (key_note, value_note) if n)
    return DeadLetter(
        origin.topic,
        origin.partition,
        origin.offset,
        reason,
        f"{error[:2000]} {notes}" if notes else error[:2000],
        key,
        value,
        int(time.time() * 1000),
    )


def decode(
    codec: Codec, value: bytes | None, expect: type[T], origin: Origin, key: bytes | None
) -> T | DeadLetter:
    """The decoded record, or the :class:`DeadLetter` to publish instead."""
    try:
        return codec.decode(value, expect)
    except SchemaError as exc:
        return dead_letter_for(origin, key, value, exc.reason, str(exc))
