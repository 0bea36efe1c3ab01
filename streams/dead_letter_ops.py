"""Reading dead letters back: list them, explain them, and replay the ones worth another try.

Every consumer sends what it cannot process to the dead-letter topic with the raw bytes, where
they came from and why (:mod:`streams.live.dead_letters`). Without a way back those messages
are only evidence. ``solaris dead-letters`` lists and explains them, and replays a selection to
its source topic once the cause is fixed (a schema rolled out, a clock corrected, a model
repaired): the raw key and value go back unchanged, partitioned like every other producer of
that topic (Faust's partitioner), and a replay that fails again is dead-lettered again.

A replay remembers what it sent in a consumer group (``<prefix>-dead-letter-replay``): the
next replay starts after it, so a dead letter is replayed once unless asked for again
(``from_start``). Values cut to a prefix because they were too large cannot be replayed.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from schemas.errors import SchemaError
from schemas.records import DeadLetter
from streams.codecs import make_codec
from streams.settings import Settings

#: what each dead-letter reason means and what usually fixes it
REASONS: dict[str, str] = {
    "bad_header": "not framed as a SOLARIS record (no magic byte / schema id): a foreign "
    "producer, or bytes that are not a record at all",
    "unknown_schema": "a schema id this consumer does not know: roll out the newer schemas, "
    "then replay",
    "decode_error": "the bytes do not decode with the schema they name: a broken producer",
    "invalid_field": "decoded, but a field is out of range (ids, times, sizes, NaN)",
    "wrong_record_type": "a valid record of another type on this topic: a producer wrote to "
    "the wrong topic",
    "processing_error": "valid, but a step failed on it (the error says which): fix the cause, "
    "then replay",
    "future_event_time": "dated too far ahead of the event clock: fix the producer's clock, "
    "then replay",
}
#: marks a dead letter whose raw value was cut (see streams.live.dead_letters)
CUT_MARK = "cut to its first"


@dataclass(frozen=True, slots=True)
class Found:
    """One dead letter as read back: where it sits in the dead-letter topic, and the record."""

    partition: int
    offset: int
    letter: DeadLetter

    @property
    def replayable(self) -> bool:
        """The whole original is here (not cut), so it can be sent again."""
        return self.letter.raw_value is not None and CUT_MARK not in self.letter.error


def decode_all(
    raw: Iterable[tuple[int, int, bytes | None]], settings: Settings
) -> tuple[list[Found], int]:
    """Decode ``(partition, offset, value)`` of the dead-letter topic; also counts undecodable
    ones (never expected: only our consumers write there)."""
    codec = make_codec(settings)
    found: list[Found] = []
    bad = 0
    for partition, offset, value in raw:
        try:
            found.append(Found(partition, offset, codec.decode(value, DeadLetter)))
        except SchemaError:
            bad += 1
    return found, bad


def select(
    found: Sequence[Found], reason: str | None = None, source_topic: str | None = None
) -> list[Found]:
    """The dead letters of ``reason`` and from ``source_topic`` (full or short name)."""

    def source_ok(letter: DeadLetter) -> bool:
        if source_topic is None:
            return True
        return letter.source_topic == source_topic or letter.source_topic.endswith(
            "." + source_topic
        )

    return [
        f for f in found if (reason is None or f.letter.reason == reason) and source_ok(f.letter)
    ]


def explain(found: Sequence[Found]) -> list[dict[str, object]]:
    """One row per (source topic, reason): how many, one error, what it means."""
    counts = Counter((f.letter.source_topic, f.letter.reason) for f in found)
    sample = {(f.letter.source_topic, f.letter.reason): f.letter.error for f in found}
    return [
        {
            "source_topic": topic,
            "reason": reason,
            "count": n,
            "example_error": sample[(topic, reason)][:300],
            "meaning": REASONS.get(reason, "unknown reason"),
        }
        for (topic, reason), n in counts.most_common()
    ]


#: a message's identity across its dead letters: source topic, key, sha256 of the value
Identity = tuple[str, bytes | None, str]


def identity(letter: DeadLetter) -> Identity:
    digest = hashlib.sha256(letter.raw_value or b"").hexdigest()
    return (letter.source_topic, letter.raw_key, digest)


def failures(history: Iterable[Found]) -> Counter[Identity]:
    """How often each message was dead-lettered: every failure, first or after a replay, left
    one dead letter, so the dead-letter topic itself counts a message's attempts."""
    return Counter(identity(f.letter) for f in history)


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What a replay sends, and what it does not and why."""

    send: list[Found]  #: one dead letter per message (its newest), to go back
    refused: list[Found]  #: cut values, and sources outside this deployment's topics
    parked: list[Found]  #: messages that failed ``max_attempts`` times: left for a person
    duplicates: int = 0  #: older dead letters of a message that is sent (or parked) once


def replay_plan(
    found: Sequence[Found],
    settings: Settings,
    history: Sequence[Found] | None = None,
    max_attempts: int = 3,
) -> ReplayPlan:
    """Sort the selected dead letters ``found``: refused are values cut to a prefix and sources
    that are not one of this deployment's topics (a dead letter never sends data anywhere
    else); parked are messages that already failed ``max_attempts`` times, counted over
    ``history`` (the whole dead-letter topic; default ``found``): a poison message replayed
    without limit would fail, and be dead-lettered and replayed, for ever. A message
    dead-lettered several times is sent (or parked) once."""
    ours = settings.topic_prefix + "."
    counts = failures(found if history is None else history)
    newest: dict[Identity, Found] = {}
    refused: list[Found] = []
    for f in found:
        if not (f.replayable and f.letter.source_topic.startswith(ours)):
            refused.append(f)
            continue
        key = identity(f.letter)
        if key not in newest or f.letter.failed_at_ms >= newest[key].letter.failed_at_ms:
            newest[key] = f
    send = [f for k, f in newest.items() if counts[k] < max_attempts]
    parked = [f for k, f in newest.items() if counts[k] >= max_attempts]
    duplicates = len(found) - len(refused) - len(newest)
    return ReplayPlan(send, refused, parked, duplicates)
