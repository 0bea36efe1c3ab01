"""The reader's result types and the in-process helpers it is given (cold-start index, state
decoder), kept apart so :mod:`store.reader` holds the lookup logic (it re-exports these)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from store.history_values import StoredHistory


class Lookup(NamedTuple):
    """What :meth:`FeatureReader.lookup` returns (unpacks as a 3-tuple)."""

    vectors: np.ndarray  #: float32 [n, dim]; zeros where missing
    tiers: np.ndarray  #: uint8 [n]; :class:`Tier` codes
    ages_ms: np.ndarray  #: int64 [n]; event-time age of the served value, -1 where missing


class RequestFeatures(NamedTuple):
    """What :meth:`FeatureReader.lookup_with_history` returns."""

    lookup: Lookup
    #: the user's stored history (empty when absent or corrupt); None when the read failed
    history: StoredHistory | None


class ColdStartIndex(Protocol):
    """Finds similar users for a user without a stored neighbour list, from a representation
    available at ranking time (e.g. the request's own candidate items). Non-blocking, in-process."""

    def neighbours_for_items(
        self, item_ids: Sequence[int], k: int, exclude_user: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(user_ids int64 [<=k], weights float32 [<=k])``, best first."""
        ...


class StateDecoder(Protocol):
    """Rebuilds the FM's interaction embedding of any candidate from a stored user state
    (``models.runtime.StateRunner``: the FM's own head over the state). In-process, blocking,
    batched; runs inside the lookup's deadline."""

    @property
    def width(self) -> int:
        """Floats per stored state."""
        ...

    def decode(self, item_ids: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(embeddings float32 [n, dim], logits float32 [n])`` of ``item_ids`` [n] from
        ``states`` float32 [n, width]."""
        ...


@runtime_checkable
class Warmable(Protocol):
    """A store that opens its read connections ahead of the first read (e.g. Redis)."""

    def warm(self) -> None:
        """Blocking, bounded, idempotent; never raises."""
        ...
