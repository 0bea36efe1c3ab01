"""Per-user interaction sequences and the leave-last-out split of sequential recommendation.

Every interaction of a user is one step of the sequence (explicit ratings count as implicit
feedback, as in the SASRec literature); the step's label (liked or not) and its time are kept
as the FM reads them. Leave-last-out: the user's last step is the test target, the one before
the validation target, the rest is training; users with fewer than three steps are dropped.
Items are indexed as the FM's vocabulary indexes them (0 padding, 1 unknown, 2.. items).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.data.loaders import Interactions
from models.features import gap_buckets

#: first item index (0 is padding, 1 the unknown item)
FIRST_ITEM = 2
#: label tokens as the FM reads them
NOT_LIKED, LIKED = 1, 2
MIN_STEPS = 3


@dataclass(frozen=True)
class Sequences:
    """Each user's steps, oldest first (lists aligned by user)."""

    users: np.ndarray  #: the dataset's user ids [U]
    items: list[np.ndarray]  #: item indices (>= FIRST_ITEM) per user
    labels: list[np.ndarray]  #: NOT_LIKED / LIKED per step
    times_ms: list[np.ndarray]
    item_ids: np.ndarray  #: the dataset's item id of index FIRST_ITEM + i

    @property
    def n_items(self) -> int:
        """Size of the item vocabulary (padding and unknown included)."""
        return int(self.item_ids.shape[0]) + FIRST_ITEM

    def __len__(self) -> int:
        return int(self.users.shape[0])

    @property
    def steps(self) -> int:
        return sum(int(s.shape[0]) for s in self.items)


def from_interactions(log: Interactions, min_steps: int = MIN_STEPS) -> Sequences:
    """Sequences of every user with at least ``min_steps`` steps, in the log's order (time,
    then file order within a tie: ``Interactions`` is sorted stably)."""
    keep_users, counts = np.unique(log.user_id, return_counts=True)
    kept = set(keep_users[counts >= min_steps].tolist())
    mask = np.fromiter((u in kept for u in log.user_id.tolist()), bool, len(log))
    user, item = log.user_id[mask], log.item_id[mask]
    ts, label = log.ts_ms[mask], log.label[mask]
    item_ids, item_index = np.unique(item, return_inverse=True)
    order = np.argsort(user, kind="stable")  # by user, time order kept within each
    user, ts, label = user[order], ts[order], label[order]
    index = item_index[order] + FIRST_ITEM
    users, starts = np.unique(user, return_index=True)
    bounds = [*starts.tolist(), len(user)]
    cut = [slice(bounds[i], bounds[i + 1]) for i in range(len(users))]
    tokens = np.where(label > 0, LIKED, NOT_LIKED).astype(np.int64)
    return Sequences(
        users=users,
        items=[index[s].astype(np.int64) for s in cut],
        labels=[tokens[s] for s in cut],
        times_ms=[ts[s].astype(np.int64) for s in cut],
        item_ids=item_ids,
    )


@dataclass(frozen=True)
class Batch:
    """Model inputs for some users at one prediction point each (left-padded to ``L``)."""

    hist_item: np.ndarray  #: int64 [B, L]
    hist_label: np.ndarray  #: int64 [B, L]
    hist_gap: np.ndarray  #: int64 [B, L], relative to the prediction time
    target: np.ndarray  #: int64 [B, L]: the next item after each position (0: no loss)


def window(seqs: Sequences, users: np.ndarray, ends: np.ndarray, length: int) -> Batch:
    """For user ``users[b]``: the ``length`` steps before step ``ends[b]`` as history, gaps
    relative to step ``ends[b]``'s time (the prediction's "now"), and each position's next step
    as its target (the last position's is step ``ends[b]`` itself)."""
    b = len(users)
    hist_item = np.zeros((b, length), np.int64)
    hist_label = np.zeros((b, length), np.int64)
    times = np.zeros((b, length), np.int64)
    target = np.zeros((b, length), np.int64)
    now = np.zeros(b, np.int64)
    for row, (u, end) in enumerate(zip(users.tolist(), ends.tolist(), strict=True)):
        items, labels, ts = seqs.items[u], seqs.labels[u], seqs.times_ms[u]
        start = max(0, end - length)
        n = end - start
        if n:
            hist_item[row, -n:] = items[start:end]
            hist_label[row, -n:] = labels[start:end]
            times[row, -n:] = ts[start:end]
            target[row, -n:] = items[start + 1 : end + 1]
        now[row] = ts[end]
    gaps = gap_buckets(now, times, hist_label > 0)
    return Batch(hist_item, hist_label, gaps, target)


def split_points(seqs: Sequences) -> tuple[np.ndarray, np.ndarray]:
    """(validation step, test step) of every user: the second-to-last and the last."""
    lengths = np.array([s.shape[0] for s in seqs.items], np.int64)
    return lengths - 2, lengths - 1


def final_targets(batch: Batch) -> np.ndarray:
    """The item each row predicts at its last position (its prediction point)."""
    return batch.target[:, -1]
