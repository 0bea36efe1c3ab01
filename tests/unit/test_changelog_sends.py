"""The table changelog hook that produces through librdkafka (streams.live.changelog_sends):
Faust's bytes, the event's partition, forward-only persisted offsets. The sender is a recorder
here; the real producer and the kill -9 durability run are integration tests
(test_agent_sends.py, test_changelog_durability.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest

from streams.live.changelog_sends import (
    ChangelogDelivery,
    ChangelogProducer,
    header_list,
    install_changelog_producer,
)
from streams.live.sends import FaustSender


class RecordingSender:
    """Keeps every ``produce_now`` call; each returns a future already settled."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def produce_now(self, name: str, key: Any, value: Any, partition: int, **kw: Any) -> Any:
        self.calls.append({"name": name, "key": key, "value": value, "partition": partition, **kw})
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class OffsetStore:
    def __init__(self) -> None:
        self.writes: list[tuple[Any, int]] = []

    def set_persisted_offset(self, tp: Any, offset: int) -> None:
        self.writes.append((tp, offset))


@pytest.fixture
def table() -> Any:
    app = faust.App("changelog-unit", broker="kafka://127.0.0.1:1", store="memory://")
    return app.Table("history", default=None, partitions=4)


def test_key_and_value_bytes_are_what_faust_recovery_reads(table: Any) -> None:
    sender = RecordingSender()
    hook = ChangelogProducer(table, sender)  # type: ignore[arg-type]

    async def send() -> ChangelogDelivery:
        return hook.send_changelog(3, 42, '{"items": [1, 2]}')

    delivery = asyncio.run(send())
    call = sender.calls[0]
    assert call["name"] == table.changelog_topic.get_topic_name()
    assert call["partition"] == 3 and delivery.message.partition == 3
    serializers = table.app.serializers
    assert serializers.loads_key(None, call["key"], serializer=table.key_serializer) == 42
    value = serializers.loads_value(None, call["value"], serializer=table.value_serializer)
    assert value == '{"items": [1, 2]}'


def test_a_delivery_is_awaitable_and_a_missing_partition_keeps_fausts_path(table: Any) -> None:
    sender = RecordingSender()
    hook = ChangelogProducer(table, sender)  # type: ignore[arg-type]
    faust_calls: list[tuple[Any, ...]] = []
    hook._faust_send = lambda *args: faust_calls.append(args) or "faust"

    async def run() -> Any:
        await hook.send_changelog(0, 1, "v")
        return hook.send_changelog(None, 1, "v")

    assert asyncio.run(run()) == "faust"
    assert len(sender.calls) == 1 and faust_calls == [(None, 1, "v", None, None)]


def test_persisted_offsets_only_move_forward_per_partition(table: Any) -> None:
    hook = ChangelogProducer(table, RecordingSender())  # type: ignore[arg-type]
    store = OffsetStore()
    table._data = store  # the table's store: what Faust's own hook writes to
    for partition, offset in [(0, 5), (1, 2), (0, 4), (0, 6), (1, 2)]:
        hook.delivered(partition, offset)
    assert [(tp.partition, o) for tp, o in store.writes] == [(0, 5), (1, 2), (0, 6)]
    assert all(tp.topic == hook.name for tp, _ in store.writes)


def test_only_the_librdkafka_sender_takes_over_the_changelog(table: Any) -> None:
    assert install_changelog_producer(table, FaustSender({})) is None
    assert header_list(None) is None and header_list({}) is None
    assert header_list({"a": b"1"}) == [("a", b"1")] and header_list([("b", b"2")]) == [("b", b"2")]
