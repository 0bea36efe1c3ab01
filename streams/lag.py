"""Consumer lag per group / topic / partition (committed vs end offsets) with confluent-kafka.

Uses the AdminClient for committed offsets and a throwaway consumer that never subscribes for
watermarks, so measuring lag never joins (or disturbs) a consumer group.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition

from streams.errors import KafkaUnavailable
from streams.kafka_clients import make_admin, make_consumer
from streams.settings import Settings

NOTHING_COMMITTED = -1001


@dataclass(frozen=True, slots=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int  #: -1001 when the group committed nothing on this partition
    end: int

    @property
    def lag(self) -> int:
        return (
            self.end - max(self.committed, 0) if self.committed != NOTHING_COMMITTED else self.end
        )


class LagReader:
    """Reads lag of groups on topics; reuse one instance for repeated polling."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.admin = make_admin(settings)
        self._consumer = make_consumer(settings, "solaris-lag-probe", {"enable.auto.commit": False})

    def close(self) -> None:
        self._consumer.close()

    def groups(self, prefix: str | None = None) -> list[str]:
        """Consumer groups whose id starts with ``prefix`` (default: the topic prefix)."""
        prefix = self.settings.topic_prefix if prefix is None else prefix
        try:
            result = self.admin.list_consumer_groups(request_timeout=10).result()
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot list consumer groups: {exc}") from exc
        return sorted(g.group_id for g in result.valid if g.group_id.startswith(prefix))

    def lag(self, groups: Iterable[str], topics: Iterable[str] | None = None) -> list[PartitionLag]:
        """Lag of every (group, topic, partition) the group has committed on or is asked about."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        wanted = set(topics) if topics is not None else None
        out: list[PartitionLag] = []
        for group in groups:
            try:
                fut = self.admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group)], request_timeout=10
                )
                committed = fut[group].result().topic_partitions
            except KafkaException as exc:
                raise KafkaUnavailable(f"cannot read offsets of {group}: {exc}") from exc
            by_tp = {(tp.topic, tp.partition): tp.offset for tp in committed}
            if wanted is not None:
                for topic in wanted:
                    for p in self._partitions(topic):
                        by_tp.setdefault((topic, p), NOTHING_COMMITTED)
            for (topic, part), off in sorted(by_tp.items()):
                if wanted is not None and topic not in wanted:
                    continue
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, part), timeout=10
                )
                out.append(PartitionLag(group, topic, part, off, high))
        return out

    def _partitions(self, topic: str) -> list[int]:
        meta = self._consumer.list_topics(topic, timeout=10).topics.get(topic)
        return sorted(meta.partitions) if meta is not None and not meta.error else []

    def assigned(self, groups: Iterable[str]) -> dict[str, set[str]]:
        """Topics each group's members are assigned now (from the group coordinator)."""
        groups = list(groups)
        try:
            futures = self.admin.describe_consumer_groups(groups, request_timeout=10)
            described = {g: f.result() for g, f in futures.items()}
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot describe groups {groups}: {exc}") from exc
        out: dict[str, set[str]] = {}
        for group, desc in described.items():
            topics: set[str] = set()
            for member in desc.members:
                if member.assignment is not None:
                    topics.update(tp.topic for tp in member.assignment.topic_partitions)
            out[group] = topics
        return out

    def wait_drained(
        self,
        groups: Iterable[str],
        topics: Iterable[str],
        timeout_s: float = 60.0,
        poll_s: float = 0.05,
    ) -> bool:
        """Block until every group has committed every message of the ``topics`` it consumes.

        A group's topics are those its members are assigned (so the ranker is not asked about
        impressions). Returns False on timeout. Two consecutive zero readings guard against
        reading a topic's end offset just before an upstream agent's output landed there.
        """
        wanted = set(topics)
        per_group = {g: ts & wanted for g, ts in self.assigned(groups).items()}
        deadline = time.monotonic() + timeout_s
        zeros = 0
        while time.monotonic() < deadline:
            drained = all(
                p.lag == 0 for g, ts in per_group.items() if ts for p in self.lag([g], ts)
            )
            if drained:
                zeros += 1
                if zeros >= 2:
                    return True
            else:
                zeros = 0
            time.sleep(poll_s)
        return False


#: per describe while waiting for the groups (retried until the deadline)
DESCRIBE_TIMEOUT_S = 2.0


def wait_for_groups(settings: Settings, groups: list[str], timeout_s: float = 120.0) -> None:
    """Block until every consumer group exists and is Stable (workers joined and assigned)."""
    from confluent_kafka import ConsumerGroupState

    reader = LagReader(settings)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            # short: on a fresh broker the first describe waited 60 s for a coordinator
            futs = reader.admin.describe_consumer_groups(groups, request_timeout=DESCRIBE_TIMEOUT_S)
            try:
                states = [f.result().state for f in futs.values()]
            except Exception:  # groups not created yet, or no coordinator yet
                states = []
            if states and all(s == ConsumerGroupState.STABLE for s in states):
                return
            time.sleep(1.0)
    finally:
        reader.close()
    raise TimeoutError(f"consumer groups {groups} not stable after {timeout_s:.0f} s")
