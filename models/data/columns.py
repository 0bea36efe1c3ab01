"""Columnar (numpy) views of recorded traffic: :class:`Requests` and :class:`Impressions`.

These are the stable, documented inputs of feature building, the simulator and the stats: the
generator and the converter produce them, :mod:`models.data.traffic` reads them back from a file.
Both tables are in file order = event-time order (a request precedes its impressions).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from models.data.errors import DataError
from schemas.records import ImpressionEvent, RequestEvent

DEFAULT_SURFACE = "feed"


def _check(name: str, arr: np.ndarray, dtype: type, n: int) -> None:
    if arr.dtype != dtype or arr.shape != (n,):
        raise DataError(f"{name}: need {np.dtype(dtype)}[{n}], got {arr.dtype}{list(arr.shape)}")


@dataclass(frozen=True, slots=True, eq=False)
class Requests:
    """Ranking requests, one row each, sorted by ``event_time_ms`` (stable).

    Shapes and dtypes (``n`` requests, ``c`` candidates in all):
    ``request_id`` object[n] (str), ``user_id`` int64[n], ``event_time_ms`` int64[n],
    ``cand_offsets`` int64[n + 1] (request ``i`` has ``candidates[cand_offsets[i]:
    cand_offsets[i + 1]]``), ``candidates`` int64[c] (item ids, in the request's order).
    """

    request_id: np.ndarray
    user_id: np.ndarray
    event_time_ms: np.ndarray
    cand_offsets: np.ndarray
    candidates: np.ndarray

    def __post_init__(self) -> None:
        n = self.user_id.shape[0]
        _check("Requests.request_id", self.request_id, object, n)
        _check("Requests.user_id", self.user_id, np.int64, n)
        _check("Requests.event_time_ms", self.event_time_ms, np.int64, n)
        _check("Requests.cand_offsets", self.cand_offsets, np.int64, n + 1)
        _check("Requests.candidates", self.candidates, np.int64, int(self.candidates.shape[0]))
        if self.cand_offsets[0] != 0 or self.cand_offsets[-1] != self.candidates.shape[0]:
            raise DataError("Requests.cand_offsets must start at 0 and end at len(candidates)")

    def __len__(self) -> int:
        return int(self.user_id.shape[0])

    @property
    def n_candidates(self) -> np.ndarray:
        """Candidates per request, int64[n]."""
        return np.diff(self.cand_offsets)

    def candidates_of(self, i: int) -> np.ndarray:
        """The candidate item ids of request ``i`` (a view, int64)."""
        return self.candidates[self.cand_offsets[i] : self.cand_offsets[i + 1]]

    @classmethod
    def from_lists(
        cls,
        request_id: list[str],
        user_id: list[int],
        event_time_ms: list[int],
        candidates: list[list[int]] | list[tuple[int, ...]] | list[np.ndarray],
    ) -> Requests:
        """Build from per-request Python lists (rows already in event-time order)."""
        sizes = np.fromiter((len(c) for c in candidates), dtype=np.int64, count=len(candidates))
        offsets = np.zeros(len(candidates) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        flat = (
            np.concatenate([np.asarray(c, dtype=np.int64) for c in candidates])
            if candidates
            else np.zeros(0, dtype=np.int64)
        )
        ids = np.empty(len(request_id), dtype=object)
        ids[:] = request_id
        return cls(
            ids,
            np.asarray(user_id, dtype=np.int64).reshape(-1),
            np.asarray(event_time_ms, dtype=np.int64).reshape(-1),
            offsets,
            flat.astype(np.int64, copy=False),
        )


@dataclass(frozen=True, slots=True, eq=False)
class Impressions:
    """Labelled impressions, one row each, in file order (grouped after their request).

    Shapes and dtypes (``m`` impressions): ``request_index`` int64[m] (row of the request in
    the matching :class:`Requests`), ``request_id`` object[m] (str), ``user_id`` int64[m],
    ``item_id`` int64[m], ``event_time_ms`` int64[m] (= the request's event time: the impression
    is the labelled outcome of what the request showed; the label is known shortly after, so
    history features must use impressions strictly before a request's event time),
    ``position`` int32[m] (0-based slot the item was shown at: the display slot in synthetic
    traffic, which carries position bias; the index in the shuffled candidate list in converted
    traffic, which carries no information), ``label`` int8[m] in {0, 1}.
    """

    request_index: np.ndarray
    request_id: np.ndarray
    user_id: np.ndarray
    item_id: np.ndarray
    event_time_ms: np.ndarray
    position: np.ndarray
    label: np.ndarray

    def __post_init__(self) -> None:
        m = self.user_id.shape[0]
        for name, dtype in (
            ("request_index", np.int64),
            ("request_id", object),
            ("user_id", np.int64),
            ("item_id", np.int64),
            ("event_time_ms", np.int64),
            ("position", np.int32),
            ("label", np.int8),
        ):
            _check(f"Impressions.{name}", getattr(self, name), dtype, m)

    def __len__(self) -> int:
        return int(self.user_id.shape[0])

    @classmethod
    def from_lists(
        cls,
        request_index: list[int],
        requests: Requests,
        item_id: list[int],
        position: list[int],
        label: list[int],
    ) -> Impressions:
        """Build from per-impression lists; ids and times are taken from ``requests``."""
        idx = np.asarray(request_index, dtype=np.int64).reshape(-1)
        return cls(
            idx,
            requests.request_id[idx],
            requests.user_id[idx],
            np.asarray(item_id, dtype=np.int64).reshape(-1),
            requests.event_time_ms[idx],
            np.asarray(position, dtype=np.int32).reshape(-1),
            np.asarray(label, dtype=np.int8).reshape(-1),
        )


def iter_events(
    requests: Requests, impressions: Impressions, surface: str = DEFAULT_SURFACE
) -> Iterator[RequestEvent | ImpressionEvent]:
    """Events in file order: each request, then its impressions.

    ``impressions.request_index`` must be non-decreasing (impressions grouped by request).
    """
    idx = impressions.request_index
    if idx.shape[0] > 1 and bool(np.any(np.diff(idx) < 0)):
        raise DataError("impressions must be grouped by request in request order")
    bounds = np.searchsorted(idx, np.arange(len(requests) + 1), side="left")
    rid, users, times = requests.request_id, requests.user_id.tolist(), requests.event_time_ms
    times_list = times.tolist()
    items, pos, lab = (
        impressions.item_id.tolist(),
        impressions.position.tolist(),
        impressions.label.tolist(),
    )
    for i in range(len(requests)):
        cands = tuple(requests.candidates_of(i).tolist())
        yield RequestEvent(rid[i], users[i], times_list[i], surface, cands)
        for j in range(bounds[i], bounds[i + 1]):
            yield ImpressionEvent(rid[i], users[i], items[j], times_list[i], pos[j], lab[j])
