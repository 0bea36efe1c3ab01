"""``solaris dead-letters``' selection, explanation and replay plan (pure logic)."""

from __future__ import annotations

from schemas.records import DeadLetter
from streams.dead_letter_ops import Found, explain, replay_plan, select
from streams.settings import Settings

SETTINGS = Settings(topic_prefix="sol")


def letter(
    topic: str, reason: str, error: str = "e", value: bytes | None = b"v", at_ms: int = 1
) -> DeadLetter:
    return DeadLetter(topic, 0, 1, reason, error, b"k", value, at_ms)


FOUND = [
    Found(0, 0, letter("sol.requests", "unknown_schema", "schema id 12", b"v12")),
    Found(0, 1, letter("sol.requests", "unknown_schema", "schema id 13", b"v13")),
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
    plan = replay_plan(FOUND, SETTINGS)
    assert [(f.partition, f.offset) for f in plan.send] == [(0, 0), (0, 1), (1, 0)]
    assert [(f.partition, f.offset) for f in plan.refused] == [(1, 1), (1, 2), (1, 3)]
    assert plan.parked == [] and plan.duplicates == 0


def test_a_message_that_keeps_failing_is_parked_not_replayed_for_ever() -> None:
    """Each failure of a message, first or after a replay, left a dead letter: the topic
    counts its attempts. At ``max_attempts`` it is parked; below, its newest letter is sent
    once however many letters it left."""
    poison = [
        Found(0, n, letter("sol.verified", "processing_error", "boom", b"p", n)) for n in (3, 7, 9)
    ]
    twice = [
        Found(1, n, letter("sol.verified", "processing_error", "boom", b"q", n)) for n in (4, 8)
    ]
    everything = [*FOUND, *poison, *twice]
    plan = replay_plan(poison + twice, SETTINGS, history=everything, max_attempts=3)
    assert [(f.partition, f.offset) for f in plan.parked] == [(0, 9)]
    assert [(f.partition, f.offset) for f in plan.send] == [(1, 8)]
    assert plan.duplicates == 3
    # the count is over the whole topic: a replay that reads only new letters still sees them
    assert replay_plan(poison[-1:], SETTINGS, history=everything).parked == poison[-1:]
    assert (
        replay_plan(poison[-1:], SETTINGS, history=everything, max_attempts=4).send == poison[-1:]
    )
