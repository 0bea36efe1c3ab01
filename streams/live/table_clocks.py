"""Per-partition event-time clocks of the table writers (what the table sweep judges by)."""

from __future__ import annotations


class PartitionClocks:
    """Per table, per partition: the newest event time its writing agent processed here."""

    def __init__(self) -> None:
        self._clocks: dict[str, dict[int, int]] = {}

    def saw(self, table: str, partition: int, event_time_ms: int) -> None:
        clocks = self._clocks.setdefault(table, {})
        if event_time_ms > clocks.get(partition, -1):
            clocks[partition] = event_time_ms

    def get(self, table: str, partition: int) -> int | None:
        return self._clocks.get(table, {}).get(partition)
