"""Serving's batched FM inputs equal the training features computed row by row."""

from __future__ import annotations

import numpy as np

from models.features import RawHistory, Vocab, fm_inputs
from models.runtime import UserHistory, cut_histories, fm_batch_inputs


def _reference_cut(histories: list[UserHistory], times: np.ndarray, length: int) -> RawHistory:
    """The obvious per-row cut (what ``cut_histories`` computed before it deduplicated)."""
    b = len(histories)
    out = [np.zeros((b, length), dt) for dt in (np.int64, np.int8, np.int64, bool)]
    for row, (h, t) in enumerate(zip(histories, times.tolist(), strict=True)):
        keep = h.times_ms < t
        items, labels, stamps = (
            h.items[keep][-length:],
            h.labels[keep][-length:],
            h.times_ms[keep][-length:],
        )
        k = items.shape[0]
        if k:
            out[0][row, length - k :] = items
            out[1][row, length - k :] = labels
            out[2][row, length - k :] = stamps
            out[3][row, length - k :] = True
    return RawHistory(*out)


def _batch(seed: int) -> tuple[np.ndarray, np.ndarray, list[UserHistory]]:
    """Requests of several pairs sharing one history object, some sharing a time, one empty."""
    rng = np.random.default_rng(seed)
    items, times, hists = [], [], []
    for r in range(12):
        k = int(rng.integers(0, 30))
        stamps = np.sort(rng.integers(0, 1_000_000, k)).astype(np.int64)
        h = UserHistory(rng.integers(1, 50, k), rng.integers(0, 2, k).astype(np.int8), stamps)
        t = int(rng.integers(0, 1_100_000)) if r % 4 else (int(stamps[k // 2]) if k else 5)
        for _ in range(int(rng.integers(1, 9))):
            items.append(int(rng.integers(1, 60)))
            times.append(t if rng.random() < 0.8 else t + int(rng.integers(1, 90_000_000)))
            hists.append(h)
    return np.array(items, np.int64), np.array(times, np.int64), hists


def test_batched_inputs_equal_row_by_row_features() -> None:
    vocab = Vocab.build(np.arange(1, 40, 2))
    for seed in range(20):
        items, times, hists = _batch(seed)
        want = fm_inputs(vocab, items, times, _reference_cut(hists, times, 7))
        got = fm_batch_inputs(vocab, items, times, hists, 7)
        assert list(got) == list(want)
        for name, arr in want.items():
            assert got[name].dtype == arr.dtype, name
            np.testing.assert_array_equal(got[name], arr, err_msg=name)
        cut = cut_histories(hists, times, 7)
        ref = _reference_cut(hists, times, 7)
        for name in ("items", "labels", "times_ms", "mask"):
            np.testing.assert_array_equal(getattr(cut, name), getattr(ref, name))
            assert getattr(cut, name).dtype == getattr(ref, name).dtype


def test_empty_batch() -> None:
    vocab = Vocab.build(np.array([3]))
    got = fm_batch_inputs(vocab, np.zeros(0, np.int64), np.zeros(0, np.int64), [], 4)
    assert {k: v.shape for k, v in got.items()} == {
        "target_item": (0,),
        "hist_item": (0, 4),
        "hist_label": (0, 4),
        "hist_gap": (0, 4),
    }
