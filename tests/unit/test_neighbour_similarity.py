"""Neighbour similarity: centred user representations, and the minimum similarity."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from streams.engine.config import ENGINE_DEFAULTS
from streams.engine.neighbours import UserRepresentations, build_index

T0 = 1_704_067_200_000


class SharedDirectionItems:
    """Item vectors = a large common component + a small item-specific one (what trained item
    embeddings look like: every item has a large projection on the catalogue's mean)."""

    def __init__(self, n: int = 400, dim: int = 16, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.dim = dim
        common = np.zeros(dim, np.float32)
        common[0] = 5.0
        self.table = (common + rng.normal(0, 1, (n, dim))).astype(np.float32)
        self.mean = self.table.mean(axis=0)

    def lookup(self, item_ids: np.ndarray) -> np.ndarray:
        return self.table[np.asarray(item_ids, np.int64)]


def test_centred_representations_tell_unrelated_users_apart() -> None:
    items = SharedDirectionItems()
    reps = UserRepresentations(items)
    a, b = reps.of_items(list(range(0, 40))), reps.of_items(list(range(200, 240)))
    assert abs(float(a @ b)) < 0.5  # unrelated candidate sets
    same = reps.of_items(list(range(0, 40, 2)) + list(range(1, 40, 2)))
    assert float(a @ same) > 0.99
    # Without centring both means point along the common direction: cosine ~ 1 for anyone.
    raw_a, raw_b = items.lookup(np.arange(40)).mean(0), items.lookup(np.arange(200, 240)).mean(0)
    cos = raw_a @ raw_b / np.linalg.norm(raw_a) / np.linalg.norm(raw_b)
    assert cos > 0.95


def test_min_similarity_drops_dissimilar_neighbours() -> None:
    items = SharedDirectionItems()
    reps = UserRepresentations(items)
    reps.observe(1, list(range(0, 40)), T0)  # the user
    reps.observe(2, list(range(0, 30)) + list(range(300, 310)), T0)  # close to user 1
    reps.observe(3, list(range(200, 240)), T0)  # unrelated
    loose = build_index(
        reps, [1, 2, 3], replace(ENGINE_DEFAULTS.neighbours, k=5, min_similarity=-1.0)
    )
    strict = build_index(
        reps, [1, 2, 3], replace(ENGINE_DEFAULTS.neighbours, k=5, min_similarity=0.5)
    )
    ids_loose = loose.lists_for([1], T0)[0].neighbours
    ids_strict = strict.lists_for([1], T0)[0].neighbours
    assert set(ids_loose) == {2, 3}
    assert ids_strict == (2,)
    ids, weights = strict.neighbours_for_items(list(range(200, 240)), 5, exclude_user=1)
    assert ids.tolist() == [3] and weights[0] > 0.99
