"""Faust table changelog messages through the workers' librdkafka producer.

Why: at 2,400 events/s Faust's changelog sends (``send_soon``: a ``FutureMessage``, the
buffer, aiokafka's accumulator and sender task, murmur2 in Python) took 14.3 % of the pipeline
worker's event loop, against 4.1 % for all the agents' own sends through librdkafka (stop 44's
profile). Here a table's ``send_changelog`` serialises key and value as Faust does (the table's
serializers, the changelog topic's schema: the same bytes) and hands them to
:meth:`LibrdkafkaSender.produce_now`, at the partition Faust would use (the event's).

What stays as it was:
- **durability**: the returned future settles on delivery; the agents await every changelog
  delivery of a batch before its events are acked (:meth:`AgentContext.record_changelog`);
- **order** per changelog partition: one idempotent producer;
- **recovery**: each delivered offset is written as the partition's persisted offset in the
  table's store (what Faust's ``_on_changelog_sent`` does), so a restarted worker replays the
  changelog from there, not from the start. Offsets only move forward.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from faust.types import TP

from streams.live.sends import LibrdkafkaSender


@dataclass(frozen=True, slots=True)
class SentTo:
    """Where a changelog message went (Faust's ``on_key_set`` reads ``fut.message.partition``)."""

    topic: str
    partition: int


class ChangelogDelivery:
    """Faust's ``FutureMessage`` as far as tables and the agents use it: ``message.partition``
    and awaiting the delivery."""

    __slots__ = ("future", "message")

    def __init__(self, future: asyncio.Future[None], message: SentTo) -> None:
        self.future = future
        self.message = message

    def __await__(self) -> Generator[Any, None, None]:
        return self.future.__await__()


class ChangelogProducer:
    """A table's changelog hook that produces through ``sender`` (see the module)."""

    def __init__(self, table: Any, sender: LibrdkafkaSender) -> None:
        self.table = table
        self.sender = sender
        self.topic = table.changelog_topic
        self.name: str = self.topic.get_topic_name()
        #: the newest persisted offset per partition (the store is written only forward)
        self.persisted: dict[int, int] = {}
        self._faust_send = table.send_changelog

    def install(self) -> None:
        """Replace the table's ``send_changelog`` (wrap it with delivery tracking after this)."""
        self.table.send_changelog = self.send_changelog

    def send_changelog(
        self,
        partition: int | None,
        key: Any,
        value: Any,
        key_serializer: Any = None,
        value_serializer: Any = None,
    ) -> ChangelogDelivery | Any:
        """Faust's signature; a changelog write without a partition keeps Faust's path."""
        if partition is None:
            return self._faust_send(partition, key, value, key_serializer, value_serializer)
        table, topic = self.table, self.topic
        key_bytes, headers = topic.prepare_key(key, key_serializer or table.key_serializer)
        value_bytes, headers = topic.prepare_value(
            value, value_serializer or table.value_serializer, headers=headers
        )
        future = self.sender.produce_now(
            self.name,
            key_bytes,
            value_bytes,
            partition,
            on_delivered=lambda offset: self.delivered(partition, offset),
            headers=header_list(headers),
        )
        return ChangelogDelivery(future, SentTo(self.name, partition))

    def delivered(self, partition: int, offset: int) -> None:
        """Record ``offset`` as the partition's persisted changelog offset (forward only)."""
        if offset <= self.persisted.get(partition, -1):
            return
        self.persisted[partition] = offset
        self.table.data.set_persisted_offset(TP(self.name, partition), offset)


def header_list(headers: Any) -> list[tuple[str, str | bytes | None]] | None:
    """Faust's headers (a mapping or pairs, often empty) as librdkafka takes them."""
    if not headers:
        return None
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def install_changelog_producer(table: Any, sender: Any) -> ChangelogProducer | None:
    """Route ``table``'s changelog through ``sender`` when it is librdkafka (else Faust's)."""
    if not isinstance(sender, LibrdkafkaSender):
        return None
    hook = ChangelogProducer(table, sender)
    hook.install()
    return hook
