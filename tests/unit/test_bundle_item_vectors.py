"""BundleItemVectors: each id's stored row, zeros for an id the bundle does not have."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streams.models_loader import BundleItemVectors


def _saved(tmp_path: Path, ids: list[int], dim: int = 3) -> tuple[BundleItemVectors, np.ndarray]:
    vectors = np.arange(len(ids) * dim, dtype=np.float32).reshape(len(ids), dim) + 1.0
    path = tmp_path / "item_vectors.npz"
    np.savez(path, ids=np.asarray(ids, np.int64), vectors=vectors)
    return BundleItemVectors(path), vectors


def test_lookup_gives_each_known_ids_row_and_zeros_for_unknown_ids(tmp_path: Path) -> None:
    items, vectors = _saved(tmp_path, [3, 7, 10, 42])
    # below the smallest, between two, above the largest, repeats, and NumPy's own ints
    query = np.array([7, 1, 42, 8, 3, 99, 7, 10], np.int64)
    want = {3: vectors[0], 7: vectors[1], 10: vectors[2], 42: vectors[3]}
    got = items.lookup(query)
    assert got.dtype == np.float32 and got.shape == (8, 3)
    for row, item in zip(got, query, strict=True):
        np.testing.assert_array_equal(row, want.get(int(item), np.zeros(3, np.float32)))
    np.testing.assert_array_equal(items.table, vectors)  # the zero row is not an item's
    np.testing.assert_allclose(items.mean, vectors.mean(axis=0))


def test_a_lookup_does_not_change_the_table_and_an_empty_bundle_gives_zeros(
    tmp_path: Path,
) -> None:
    items, vectors = _saved(tmp_path, [5, 6])
    out = items.lookup(np.array([9, 5], np.int64))
    out[:] = -1.0  # the caller owns what it got
    np.testing.assert_array_equal(items.lookup(np.array([9, 5])), [[0, 0, 0], vectors[0]])
    empty, _ = _saved(tmp_path, [])
    assert empty.lookup(np.array([1, 2], np.int64)).shape == (2, 3)
    assert not empty.lookup(np.array([1, 2], np.int64)).any()
    assert items.lookup(np.array([], np.int64)).shape == (0, 3)
