"""Errors of the streams package."""

from __future__ import annotations


class StreamsError(Exception):
    """Root of every streams error."""


class KafkaUnavailable(StreamsError):
    """The broker could not be reached or refused an admin/produce/consume call."""


class InfraError(StreamsError):
    """A local infra script (Kafka/Redis start, stop, status) failed."""


class TopicLayoutError(StreamsError):
    """Topics a worker co-reads have different partition counts (state would be split)."""
