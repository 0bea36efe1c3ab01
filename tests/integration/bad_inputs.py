"""Malformed messages for the live pipeline's bad-input checks, each with the dead-letter
reason the pipeline must give it (one of every way a message can be wrong)."""

from __future__ import annotations

import math

from schemas.codec import Codec
from schemas.limits import Limits
from schemas.records import ImpressionEvent, ProposalBatch, RequestEvent
from tests.integration.live_harness import raw_encode

T0 = 1_704_067_200_000


def bad_messages() -> dict[str, list[tuple[bytes, str]]]:
    """topic -> [(value, expected dead-letter reason)]."""
    codec = Codec()
    big = Codec(Limits(max_candidates=100_000))
    return {
        "requests": [
            (b"\xff\xfenot avro at all", "bad_header"),
            (b"\x00\x00\x00\x00\x01\xff\xff\xff\xff", "decode_error"),
            (b"\x00\x00\x00\x03\xe7whatever", "unknown_schema"),
            (big.encode(RequestEvent("big", 1, T0, "feed", tuple(range(2_000)))), "invalid_field"),
            (codec.encode(ImpressionEvent("r", 1, 2, T0, 0, 1)), "wrong_record_type"),
        ],
        "impressions": [
            (raw_encode(ImpressionEvent("r", 1, 2, T0, 0, 7)), "invalid_field"),
            (b"", "bad_header"),
        ],
        "speculated": [
            (
                raw_encode(ProposalBatch("r", 1, T0, 2, (5, 6), ("c", "c"), (math.nan, 0.5))),
                "invalid_field",
            ),
        ],
    }
