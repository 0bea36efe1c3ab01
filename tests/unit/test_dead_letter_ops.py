"""``solaris dead-letters``' selection, explanation and replay plan (pure logic)."""

from __future__ import annotations

from schemas.records import DeadLetter
from streams.dead_letter_ops import Found, explain, replay_plan, select
from streams.settings import Settings

SETTINGS = Settings(topic_prefix="sol")


def letter(topic: str, reason: str, error: str = "e", value: bytes | None = b"v") -> DeadLetter:
    return DeadLetter(topic, 0, 1, reason, error, b"k", value, 1)


FOUND = [
    Found(0, 0, letter("sol.requests", "unknown_schema", "schema id 12")),
    Found(0, 1, letter("sol.requests", "unknown_schema", "schema id 13")),
    Found(1, 0, letter("sol.verified", "processing_error", "ModelUnavailable")),
    Found(
        1, 1, letter("sol.requests", "bad_header", "boom [raw value cut to its first 5 of 9 bytes")
    ),
    Found(1, 2, letter("other.requests", "unknown_schema")),
    Found(1, 3, letter("sol.requests", "decode_error", value=None)),
]


def test_select_by_reason_and_source_topic_short_or_full() -> None:
    assert [f.offset for f in select(FOUND, "unknown_schema", "requests")] == [0, 1, 2]
    assert [f.offset for f in select(FOUND, source_topic="sol.verified")] == [0]
    assert len(select(FOUND)) == len(FOUND)


def test_explain_counts_by_source_and_reason_with_the_meaning() -> None:
    rows = explain(FOUND)
    first = rows[0]
    assert (first["source_topic"], first["reason"], first["count"]) == (
        "sol.requests",
        "unknown_schema",
        2,
    )
    assert "roll out the newer schemas" in str(first["meaning"])
    assert sum(int(r["count"]) for r in rows) == len(FOUND)  # type: ignore[call-overload]


def test_replay_never_sends_cut_values_or_to_foreign_topics() -> None:
    send, refused = replay_plan(FOUND, SETTINGS)
    assert [(f.partition, f.offset) for f in send] == [(0, 0), (0, 1), (1, 0)]
    assert [(f.partition, f.offset) for f in refused] == [(1, 1), (1, 2), (1, 3)]
