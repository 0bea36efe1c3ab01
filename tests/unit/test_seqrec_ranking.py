"""Full-ranking metrics and the leave-last-out windows of the FM's sequential yardstick."""

from __future__ import annotations

import numpy as np

from models.data.loaders import Interactions
from models.seqrec.ranking import hit_rate, ndcg, target_ranks
from models.seqrec.sequences import LIKED, NOT_LIKED, from_interactions, split_points, window


def test_ranks_count_strictly_better_items() -> None:
    scores = np.array([[-np.inf, -np.inf, 0.9, 0.1, 0.5], [-np.inf, -np.inf, 0.1, 0.2, 0.3]])
    ranks = target_ranks(scores, np.array([4, 2]))
    assert ranks.tolist() == [1, 2]


def test_hit_rate_and_ndcg_by_hand() -> None:
    ranks = np.array([0, 1, 9, 10])
    assert hit_rate(ranks, 10) == 0.75
    want = (1.0 + 1 / np.log2(3) + 1 / np.log2(11)) / 4
    assert abs(ndcg(ranks, 10) - want) < 1e-12


def log(rows: list[tuple[int, int, int, int]]) -> Interactions:
    u, i, t, y = (np.array(c, np.int64) for c in zip(*rows, strict=True))
    return Interactions("t", u, i, t, y.astype(np.int8))


def test_sequences_split_and_windows() -> None:
    rows = [(7, 100, 1000, 1), (7, 200, 2000, 0), (9, 100, 1500, 1), (7, 300, 3000, 1)]
    rows += [(7, 100, 4000, 0), (9, 300, 2500, 0)]  # user 9 has 2 steps: dropped
    seqs = from_interactions(log(sorted(rows, key=lambda r: r[2])))
    assert seqs.users.tolist() == [7]
    assert seqs.item_ids.tolist() == [100, 200, 300]
    assert seqs.items[0].tolist() == [2, 3, 4, 2]
    assert seqs.labels[0].tolist() == [LIKED, NOT_LIKED, LIKED, NOT_LIKED]
    valid, test = split_points(seqs)
    assert (valid.tolist(), test.tolist()) == ([2], [3])
    b = window(seqs, np.array([0]), test, length=5)  # history: steps 0..2, predicts step 3
    assert b.hist_item.tolist() == [[0, 0, 2, 3, 4]]
    assert b.target.tolist() == [[0, 0, 3, 4, 2]]
    assert b.hist_label[0, :2].tolist() == [0, 0] and (b.hist_gap[0, :2] == 0).all()
    assert (b.hist_gap[0, 2:] > 0).all()  # gaps relative to step 3's time
    short = window(seqs, np.array([0]), valid, length=1)  # only the latest step fits
    assert short.hist_item.tolist() == [[3]] and short.target.tolist() == [[4]]
