"""Micro-batching for the FM: flush on max batch size or on max wait, whichever comes first.

Pure: the caller passes the clock (wall-clock ms live, anything in tests), so flush behaviour is
testable without sleeping. Items keep arrival order across batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class MicroBatcher(Generic[T]):
    max_size: int
    max_wait_ms: float
    _items: list[T] = field(default_factory=list)
    _first_at: float | None = None

    def __post_init__(self) -> None:
        if self.max_size < 1:
            raise ValueError("max_size must be >= 1")

    def add(self, item: T, now_ms: float) -> list[list[T]]:
        """Queue ``item``; returns the batches that became full (usually none or one)."""
        if not self._items:
            self._first_at = now_ms
        self._items.append(item)
        if len(self._items) >= self.max_size:
            return [self._take()]
        return []

    def due(self, now_ms: float) -> bool:
        return (
            bool(self._items)
            and self._first_at is not None
            and now_ms - self._first_at >= self.max_wait_ms
        )

    def poll(self, now_ms: float) -> list[T] | None:
        """The pending batch if its oldest item has waited ``max_wait_ms``, else None."""
        return self._take() if self.due(now_ms) else None

    def flush(self) -> list[T]:
        """Everything pending (possibly empty)."""
        return self._take()

    def __len__(self) -> int:
        return len(self._items)

    def _take(self) -> list[T]:
        items, self._items, self._first_at = self._items, [], None
        return items
