"""Model features shared by training (torch) and serving (onnxruntime): numpy only.

Everything the FM and the VMs see is computed here, by the same code offline and online, so a
model exported to ONNX gets exactly the inputs it was trained on (the parity tests rely on it).

Conventions (all arrays are numpy, shapes in brackets):

- Id vocabularies map raw ids to dense indices: ``0`` = padding, ``1`` = out-of-vocabulary
  (a *trained* slot: see ``models.train``), ``2..`` = ids seen in the model's training period.
- A history is the user's last ``L`` impressions **strictly before a cutoff** (``time < cutoff``),
  oldest first, left-padded to ``L``. The cutoff is the event time of the example, or
  ``event time − Δ`` when the FM's inputs are stale by ``Δ`` (an embedding computed ahead of time).
- History label tokens: ``0`` padding, ``1`` negative, ``2`` positive.
- History time gaps (cutoff − interaction time) are bucketed on a log-like scale so the FM can
  weigh lasting taste (days, months) against the last minutes; ``0`` is padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

PAD = 0
OOV = 1

#: Upper edges of the time-gap buckets; bucket ``k + 1`` holds gaps in ``[edge[k-1], edge[k])``.
GAP_EDGES_MS: np.ndarray = np.array(
    [
        MINUTE_MS,
        5 * MINUTE_MS,
        30 * MINUTE_MS,
        2 * HOUR_MS,
        12 * HOUR_MS,
        DAY_MS,
        7 * DAY_MS,
        30 * DAY_MS,
        365 * DAY_MS,
    ],
    dtype=np.int64,
)
N_GAP_BUCKETS = len(GAP_EDGES_MS) + 2  # padding + one bucket per edge + "older than a year"
N_LABEL_TOKENS = 3
N_HOURS = 24
N_WEEKDAYS = 7


@dataclass(frozen=True)
class Vocab:
    """Sorted raw ids; ``lookup`` maps raw ids to dense indices (``OOV`` when unseen)."""

    ids: np.ndarray  # int64 [n], sorted, unique

    @classmethod
    def build(cls, raw_ids: np.ndarray) -> Vocab:
        return cls(np.unique(np.asarray(raw_ids, dtype=np.int64)))

    @property
    def size(self) -> int:
        """Number of embedding rows needed (padding + OOV + known ids)."""
        return int(self.ids.shape[0]) + 2

    def lookup(self, raw_ids: np.ndarray) -> np.ndarray:
        """int64 indices, same shape as ``raw_ids``; unseen ids map to ``OOV``."""
        raw = np.asarray(raw_ids, dtype=np.int64)
        if self.ids.shape[0] == 0:
            return np.full(raw.shape, OOV, dtype=np.int64)
        pos = np.searchsorted(self.ids, raw)
        pos_c = np.minimum(pos, self.ids.shape[0] - 1)
        found = self.ids[pos_c] == raw
        return np.where(found, pos_c + 2, OOV).astype(np.int64)


@dataclass(frozen=True)
class RawHistory:
    """Raw (un-mapped) histories of a batch, left-padded: ``mask`` is True on real entries."""

    items: np.ndarray  # int64 [N, L] raw item ids (0 where padded)
    labels: np.ndarray  # int8 [N, L]
    times_ms: np.ndarray  # int64 [N, L]
    mask: np.ndarray  # bool [N, L]


class HistoryIndex:
    """All impressions sorted by (user, time): answers "last L before cutoff" for many rows at once.

    Built once per dataset. A query never looks at an impression with ``time >= cutoff``, which
    is the no-leakage invariant (``tests/unit/test_features.py`` checks it by perturbing the
    future).
    """

    def __init__(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        labels: np.ndarray,
        event_time_ms: np.ndarray,
    ) -> None:
        users = np.asarray(user_ids, dtype=np.int64)
        times = np.asarray(event_time_ms, dtype=np.int64)
        order = np.lexsort((times, users))
        self._users = np.unique(users)
        self._t0 = int(times.min()) if times.size else 0
        # span leaves room for cutoffs one unit before the first event and for keys of absent users.
        self._span = (int(times.max()) - self._t0 + 3) if times.size else 3
        dense = np.searchsorted(self._users, users[order])
        self._keys = dense * self._span + (times[order] - self._t0 + 1)
        self.items = np.asarray(item_ids, dtype=np.int64)[order]
        self.labels = np.asarray(labels, dtype=np.int8)[order]
        self.times = times[order]

    def _bounds(self, user_ids: np.ndarray, cutoff_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query: [start, end) of the user's impressions with time < cutoff."""
        users = np.asarray(user_ids, dtype=np.int64)
        n_users = self._users.shape[0]
        pos = np.minimum(np.searchsorted(self._users, users), max(n_users - 1, 0))
        known = (self._users[pos] == users) if n_users else np.zeros(users.shape, dtype=bool)
        rel = np.clip(np.asarray(cutoff_ms, dtype=np.int64) - self._t0 + 1, 0, self._span - 1)
        start = np.searchsorted(self._keys, pos * self._span, side="left")
        end = np.searchsorted(self._keys, pos * self._span + rel, side="left")
        end = np.where(known, end, start)
        return start, end

    def gather(self, user_ids: np.ndarray, cutoff_ms: np.ndarray, length: int) -> RawHistory:
        """Last ``length`` impressions of each user strictly before its cutoff, oldest first."""
        start, end = self._bounds(user_ids, cutoff_ms)
        idx = end[:, None] - length + np.arange(length, dtype=np.int64)[None, :]
        mask = idx >= start[:, None]
        idx = np.where(mask, idx, 0)
        if self.items.shape[0] == 0:
            mask = np.zeros_like(mask)
            zeros = np.zeros(idx.shape, dtype=np.int64)
            return RawHistory(zeros, zeros.astype(np.int8), zeros, mask)
        return RawHistory(
            items=np.where(mask, self.items[idx], 0),
            labels=np.where(mask, self.labels[idx], 0).astype(np.int8),
            times_ms=np.where(mask, self.times[idx], 0),
            mask=mask,
        )

    def count_before(self, user_ids: np.ndarray, cutoff_ms: np.ndarray) -> np.ndarray:
        """Number of the user's impressions strictly before the cutoff, int64 [N]."""
        start, end = self._bounds(user_ids, cutoff_ms)
        counts: np.ndarray = (end - start).astype(np.int64)
        return counts


def gap_buckets(reference_ms: np.ndarray, times_ms: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Bucketed ``reference − time`` (int64 [N, L]), ``0`` where ``mask`` is False."""
    gap = np.asarray(reference_ms, dtype=np.int64)[:, None] - np.asarray(times_ms, dtype=np.int64)
    bucket = 1 + np.searchsorted(GAP_EDGES_MS, np.maximum(gap, 0), side="right")
    return np.where(mask, bucket, PAD).astype(np.int64)


def fm_inputs(
    item_vocab: Vocab,
    target_items: np.ndarray,
    reference_ms: np.ndarray,
    history: RawHistory,
) -> dict[str, np.ndarray]:
    """The FM's input tensors, by ONNX input name.

    ``reference_ms`` is the time the FM computes for (the speculation time in serving); time gaps
    are measured from it. Histories must already be cut strictly before it.
    """
    return {
        "target_item": item_vocab.lookup(target_items),
        **fm_history_inputs(item_vocab, reference_ms, history),
    }


def fm_history_inputs(
    item_vocab: Vocab, reference_ms: np.ndarray, history: RawHistory
) -> dict[str, np.ndarray]:
    """The FM's history tensors (``hist_*``), row by row: serving computes them once per
    distinct (history, reference time) of a batch and repeats the rows."""
    mask = history.mask
    label_tok = np.where(mask, history.labels.astype(np.int64) + 1, PAD)
    return {
        "hist_item": np.where(mask, item_vocab.lookup(history.items), PAD),
        "hist_label": label_tok.astype(np.int64),
        "hist_gap": gap_buckets(reference_ms, history.times_ms, mask),
    }


def context_features(event_time_ms: np.ndarray) -> np.ndarray:
    """Simple request context, int64 [N, 2]: hour of day and day of week (UTC)."""
    t = np.asarray(event_time_ms, dtype=np.int64)
    hour = (t // HOUR_MS) % N_HOURS
    weekday = (t // DAY_MS + 3) % N_WEEKDAYS  # 1970-01-01 was a Thursday: Monday = 0
    return np.stack([hour, weekday], axis=1).astype(np.int64)


def vm_inputs(
    user_vocab: Vocab,
    item_vocab: Vocab,
    user_ids: np.ndarray,
    item_ids: np.ndarray,
    event_time_ms: np.ndarray,
) -> dict[str, np.ndarray]:
    """The baseline VM's input tensors, by ONNX input name."""
    return {
        "user": user_vocab.lookup(user_ids),
        "item": item_vocab.lookup(item_ids),
        "context": context_features(event_time_ms),
    }


class HistoryArrays(Protocol):
    """One user's history as serving holds it (``models.runtime.UserHistory``): 1-D arrays,
    oldest first."""

    @property
    def items(self) -> np.ndarray: ...

    @property
    def labels(self) -> np.ndarray: ...

    @property
    def times_ms(self) -> np.ndarray: ...


def _distinct_rows(
    histories: Sequence[HistoryArrays], event_time_ms: np.ndarray
) -> tuple[list[int], np.ndarray]:
    """Rows of the first occurrence of each distinct (history object, time), and for every row
    the index of its distinct row. A micro-batch holds few (all pairs of one request share
    them), so the history work is done once per request, not once per pair."""
    firsts: list[int] = []
    seen: dict[tuple[int, int], int] = {}
    inverse: list[int] = []
    last: object = object()  # matches no history
    last_t = j = 0
    for row, (hist, t) in enumerate(zip(histories, event_time_ms.tolist(), strict=True)):
        if hist is not last or t != last_t:  # runs of one request's pairs skip the dict
            key = (id(hist), t)
            found = seen.get(key)
            if found is None:
                found = seen[key] = len(firsts)
                firsts.append(row)
            last, last_t, j = hist, t, found
        inverse.append(j)
    return firsts, np.array(inverse, np.intp)


def _cut_rows(histories: Sequence[HistoryArrays], times: Sequence[int], length: int) -> RawHistory:
    """Last ``length`` entries of each history strictly before its time, left-padded."""
    b = len(histories)
    items = np.zeros((b, length), np.int64)
    labels = np.zeros((b, length), np.int8)
    stamps = np.zeros((b, length), np.int64)
    mask = np.zeros((b, length), bool)
    for row, (hist, t) in enumerate(zip(histories, times, strict=True)):
        end = int(np.searchsorted(hist.times_ms, t, side="left"))  # strictly before t
        k = end - max(0, end - length)
        if k:
            items[row, length - k :] = hist.items[end - k : end]
            labels[row, length - k :] = hist.labels[end - k : end]
            stamps[row, length - k :] = hist.times_ms[end - k : end]
            mask[row, length - k :] = True
    return RawHistory(items, labels, stamps, mask)


def cut_histories(
    histories: Sequence[HistoryArrays], event_time_ms: np.ndarray, length: int
) -> RawHistory:
    """Last ``length`` entries of each history strictly before its event time, left-padded."""
    firsts, inverse = _distinct_rows(histories, event_time_ms)
    raw = _cut_rows([histories[r] for r in firsts], event_time_ms[firsts].tolist(), length)
    return RawHistory(
        raw.items[inverse], raw.labels[inverse], raw.times_ms[inverse], raw.mask[inverse]
    )


def fm_batch_inputs(
    item_vocab: Vocab,
    item_ids: np.ndarray,
    event_time_ms: np.ndarray,
    histories: Sequence[HistoryArrays],
    length: int,
) -> dict[str, np.ndarray]:
    """``fm_inputs(item_vocab, item_ids, event_time_ms, cut_histories(...))``, with the history
    tensors (cut, vocabulary lookup, time gaps) computed once per distinct (history, time)
    and repeated by row: equal values, a fraction of the work."""
    firsts, inverse = _distinct_rows(histories, event_time_ms)
    times = event_time_ms[firsts]
    raw = _cut_rows([histories[r] for r in firsts], times.tolist(), length)
    hist = fm_history_inputs(item_vocab, times, raw)
    return {
        "target_item": item_vocab.lookup(item_ids),
        **{name: arr[inverse] for name, arr in hist.items()},
    }
