"""Decode-or-dead-letter: every consumer turns undecodable/invalid messages into a DeadLetter.

The dead letter keeps the raw key and value bytes and where they came from (topic, partition,
offset) with a reason code, so nothing is lost and a fixed consumer can re-process them.
"""

from __future__ import annotations

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
    return DeadLetter(
        origin.topic,
        origin.partition,
        origin.offset,
        reason,
        error[:2000],
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
