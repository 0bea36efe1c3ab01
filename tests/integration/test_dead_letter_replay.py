"""``solaris dead-letters`` on a real broker: a request dead-lettered because its schema was
unknown is replayed once the cause is fixed, byte for byte, to its source topic; a cut value is
never sent; a second replay sends nothing new."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.codec import Codec
from schemas.records import DeadLetter, RequestEvent
from streams.kafka_clients import make_producer, partition_for
from streams.settings import REPO_ROOT
from streams.topic_reader import read_topic
from tests.integration.live_harness import env_for, fresh_live_settings

pytestmark = pytest.mark.integration
T0 = 1_704_067_200_000


def cli(settings, *args: str) -> str:  # type: ignore[no-untyped-def]
    out = subprocess.run(
        [sys.executable, "-m", "streams.cli", "dead-letters", *args],
        cwd=REPO_ROOT,
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_replay_sends_the_raw_message_back_once(bundle: Path) -> None:
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    codec = Codec()
    request = codec.encode(RequestEvent("r1", 7, T0, "feed", (1, 2, 3)))
    requests = settings.topic("requests")
    letters = [
        DeadLetter(requests, 1, 40, "unknown_schema", "schema id 99", b"7", request, T0),
        DeadLetter(requests, 0, 41, "bad_header", "x [raw value cut to its first 4 of 9 bytes", b"8", b"abcd", T0),
    ]  # fmt: skip
    producer = make_producer(settings)
    for dl in letters:
        producer.produce(settings.topic("dead-letter"), key=dl.raw_key, value=codec.encode(dl))
    assert producer.flush(10) == 0

    listed = json.loads(cli(settings, "list", "--json"))
    assert [(r["reason"], r["replayable"]) for r in sorted(listed, key=lambda r: r["reason"])] == [
        ("bad_header", False),
        ("unknown_schema", True),
    ]
    explained = json.loads(cli(settings, "explain", "--json"))
    assert {r["reason"]: r["count"] for r in explained} == {"unknown_schema": 1, "bad_header": 1}

    assert json.loads(cli(settings, "replay", "--dry-run"))["would_send"] == 1
    assert read_topic(settings, requests) == []  # a dry run sends nothing
    summary = json.loads(cli(settings, "replay"))
    assert (summary["sent"], summary["refused"]) == (1, 1)
    (sent,) = read_topic(settings, requests)
    assert (sent.key, sent.value) == (b"7", request)  # byte for byte
    assert sent.partition == partition_for(b"7", settings.topic_partitions)  # Faust's partition
    assert json.loads(cli(settings, "replay"))["sent"] == 0  # already replayed
    assert json.loads(cli(settings, "replay", "--from-start"))["sent"] == 1


def test_a_message_that_failed_max_attempts_times_is_parked(bundle: Path) -> None:
    """A message that fails on every replay leaves one dead letter per failure: at
    --max-attempts of them it is parked, not sent again; below, it is sent once (not once per
    letter)."""
    from streams.topics import create_topics

    settings = fresh_live_settings(bundle)
    create_topics(settings)
    codec = Codec()
    requests = settings.topic("requests")
    poison = codec.encode(RequestEvent("p", 5, T0, "feed", (4,)))
    other = codec.encode(RequestEvent("q", 6, T0, "feed", (5,)))
    letters = [
        DeadLetter(requests, 0, n, "processing_error", "boom", b"5", poison, T0 + n)
        for n in range(3)
    ]
    letters += [DeadLetter(requests, 0, 9 + n, "processing_error", "boom", b"6", other, T0 + n) for n in range(2)]  # fmt: skip
    producer = make_producer(settings)
    for dl in letters:
        producer.produce(settings.topic("dead-letter"), key=dl.raw_key, value=codec.encode(dl))
    assert producer.flush(10) == 0

    summary = json.loads(cli(settings, "replay", "--rate", "0"))
    assert (summary["sent"], summary["parked"], summary["duplicates"]) == (1, 1, 3)
    (sent,) = read_topic(settings, requests)
    assert sent.value == other
    summary = json.loads(cli(settings, "replay", "--from-start", "--max-attempts", "4"))
    assert (summary["sent"], summary["parked"]) == (2, 0)
