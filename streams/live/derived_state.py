"""Counts a worker derives from its tables, rebuilt when its partitions change.

The item prior counts the lists the ``recent`` table holds; the look-ahead counts what the
``history`` table holds. Each agent that follows one of them calls its
:class:`RebuiltOnAssignment` at the start of every batch: at the first batch after a start or a
rebalance (a new consumer generation) the counts are rebuilt from the table, which then holds
exactly this worker's partitions, so the worker holds what an uninterrupted one would.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


class RebuiltOnAssignment:
    """Rebuilds ``what`` from ``table``'s values at the first batch of each consumer generation."""

    def __init__(
        self, app: Any, table: Any, what: str, rebuild: Callable[[Iterable[Any]], None]
    ) -> None:
        self.app, self.table, self.what, self.rebuild = app, table, what, rebuild
        #: the generation whose partitions the counts cover (None: not built yet)
        self.generation: int | None = None

    def __call__(self) -> None:
        """Rebuild if the partitions may have changed since the last call (call outside any
        batch's undo log: a failed batch must not undo the rebuild)."""
        generation = self.app.consumer_generation_id
        if generation == self.generation:
            return
        started = time.perf_counter()
        values = [value for _, value in self.table.items()]
        self.rebuild(values)
        self.generation = generation
        log.info(
            f"{self.what} rebuilt from the {self.table.name} table",
            extra={
                "users": len(values),
                "generation": generation,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
