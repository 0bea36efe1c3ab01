"""The agents' librdkafka sender (streams.live.sends) against a real broker: Faust's partition
for every key, order per key, the event time as the record timestamp, a delivery settled only
by the broker's report, a refused message failing its delivery (a refused batch fails every
message in it: Kafka's unit is the batch), and close flushing what is queued."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from streams.kafka_clients import partition_for
from streams.live.sends import DeliveryFailed, LibrdkafkaSender
from streams.settings import Settings
from streams.topics import admin_client, create_topics

pytestmark = pytest.mark.integration
KEYS = [str(u).encode() for u in range(200)]
T0 = 1_700_000_000_000


def read_back(settings: Settings, topic: str, partitions: int, n: int) -> list[tuple]:
    """(partition, key, value, timestamp ms) of the first ``n`` messages of ``topic``."""
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap, "group.id": "sends-test-reader"}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.partition(), msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


def test_sends_land_where_faust_would_in_order_with_the_event_time(
    test_settings: Settings,
) -> None:
    settings = test_settings.model_copy(update={"topic_partitions": 4})
    create_topics(settings, names=("speculated",))
    sender = LibrdkafkaSender(settings)

    async def send_all() -> list[object]:
        futures = []
        for round_ in range(2):
            for i, key in enumerate(KEYS):
                value = f"{key.decode()}:{round_}".encode()
                futures.append(await sender.send("speculated", key, value, T0 + i + round_))
        assert not all(f.done() for f in futures)  # settled by delivery reports, not at once
        return list(await asyncio.wait_for(asyncio.gather(*futures), 30))

    try:
        assert asyncio.run(send_all()) == [None] * (2 * len(KEYS))
    finally:
        sender.close()
    got = read_back(settings, settings.topic("speculated"), 4, 2 * len(KEYS))
    assert len(got) == 2 * len(KEYS)
    for partition, key, value, ts in got:
        assert partition == partition_for(key, 4), key
        user, round_ = value.decode().split(":")
        assert user == key.decode() and ts == T0 + KEYS.index(key) + int(round_)
    per_key = {k: [v for _, kk, v, _ in got if kk == k] for k in KEYS}
    assert all(vs == [k + b":0", k + b":1"] for k, vs in per_key.items())


def test_a_message_the_broker_refuses_fails_its_delivery_and_sending_goes_on(
    test_settings: Settings,
) -> None:
    settings = test_settings.model_copy(update={"topic_partitions": 1})
    admin = admin_client(settings)
    topic = settings.topic("dead-letter")
    small = NewTopic(topic, 1, 1, config={"max.message.bytes": "2048"})
    for future in admin.create_topics([small], operation_timeout=30).values():
        future.result(timeout=30)
    sender = LibrdkafkaSender(settings)

    async def send_both() -> tuple[BaseException | None, object]:
        big = await sender.send("dead-letter", b"1", b"x" * 8192, T0)
        err = None
        try:
            await asyncio.wait_for(big, 30)
        except DeliveryFailed as exc:
            err = exc
        fine = await sender.send("dead-letter", b"1", b"ok", T0 + 1)
        return err, await asyncio.wait_for(fine, 30)

    try:
        err, fine = asyncio.run(send_both())
    finally:
        sender.close()
    assert isinstance(err, DeliveryFailed) and "MSG_SIZE_TOO_LARGE" in str(err), err
    assert fine is None
    assert [(v, ts) for _, _, v, ts in read_back(settings, topic, 1, 1)] == [(b"ok", T0 + 1)]


def test_close_flushes_what_is_queued_and_is_idempotent(test_settings: Settings) -> None:
    # a linger of 1 s keeps the messages queued until close: with the default 5 ms the broker
    # could ack them all before the check below (seen once in a loaded parallel run)
    settings = test_settings.model_copy(
        update={"topic_partitions": 2, "producer_linger_ms": 1000.0}
    )
    create_topics(settings, names=("embeddings",))
    sender = LibrdkafkaSender(settings)

    async def queue_some() -> None:
        for key in KEYS[:50]:
            await sender.send("embeddings", key, b"v", None)  # not awaited: close must flush

    asyncio.run(queue_some())
    assert sender.pending() > 0
    sender.close()
    assert sender.pending() == 0  # delivered before close returned
    sender.close()
    assert len(read_back(settings, settings.topic("embeddings"), 2, 50)) == 50


def test_the_deliveries_of_one_poll_wake_the_event_loop_once_not_once_a_message(
    test_settings: Settings,
) -> None:
    """Each wake-up of the loop from the delivery thread is a write to its self-pipe and a
    callback on the loop, both holding the GIL the agents need: per message, that was ~7 % of
    a core at 2,400 events/s (issue 23's profile). A poll's reports settle together."""
    settings = test_settings.model_copy(update={"topic_partitions": 2})
    create_topics(settings, names=("verified",))
    sender = LibrdkafkaSender(settings)
    wakeups = 0

    async def send_many() -> list[object]:
        nonlocal wakeups
        loop = asyncio.get_running_loop()
        wake = loop.call_soon_threadsafe

        def counted(*args: object, **kwargs: object) -> object:
            nonlocal wakeups
            wakeups += 1
            return wake(*args, **kwargs)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        futures = [await sender.send("verified", k, b"v", T0) for _ in range(4) for k in KEYS]
        return list(await asyncio.wait_for(asyncio.gather(*futures), 30))

    try:
        assert asyncio.run(send_many()) == [None] * (4 * len(KEYS))
    finally:
        sender.close()
    # 800 messages in a few produce requests (2 partitions, 5 ms linger): a handful of polls
    assert 1 <= wakeups <= 80, wakeups


def test_produce_now_lands_in_the_named_partition_and_reports_each_offset(
    test_settings: Settings,
) -> None:
    """The changelog path: no await to queue, the caller's partition (not the key's hash), and
    each delivered offset handed over before the message's future settles."""
    settings = test_settings.model_copy(update={"topic_partitions": 3})
    create_topics(settings, names=("verified",))
    name = settings.topic("verified")
    sender = LibrdkafkaSender(settings)
    offsets: list[tuple[int, int]] = []

    async def produce_all() -> list[bool]:
        futures = []
        for i, key in enumerate(KEYS[:30]):
            part = i % 3

            def seen(offset: int, part: int = part) -> None:
                offsets.append((part, offset))

            futures.append(sender.produce_now(name, key, b"v%d" % i, part, on_delivered=seen))
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        return [f.done() for f in futures]

    try:
        assert all(asyncio.run(produce_all()))
    finally:
        sender.close()
    got = read_back(settings, name, 3, 30)
    assert sorted((p, int(v[1:]) % 3) for p, _, v, _ in got) == sorted(
        (i % 3, i % 3) for i in range(30)
    )
    assert sorted(offsets) == [(p, o) for p in range(3) for o in range(10)]
