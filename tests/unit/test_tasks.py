"""Tasks: two label rules over the same log give the same impressions with different labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.data.convert import ConvertConfig
from models.data.errors import ConfigError
from models.data.tasks import Task, load_task, task_impressions, task_rule


def _ml100k(folder: Path, n_users: int = 30, per_user: int = 12) -> Path:
    """A u.data with every rating 1..5, users spread over days, sessions a few minutes apart."""
    rng = np.random.default_rng(3)
    lines = []
    for u in range(1, n_users + 1):
        t = 1_000_000_000 + u * 86_400
        for _ in range(per_user):
            t += int(rng.integers(30, 3_000))
            lines.append(f"{u}\t{int(rng.integers(1, 40))}\t{int(rng.integers(1, 6))}\t{t}\n")
    path = folder / "u.data"
    path.write_text("".join(lines))
    return path


def _taobao(folder: Path) -> None:
    rows = [
        "1,10,7,pv,1511000000",
        "1,11,7,cart,1511000010",
        "1,12,7,buy,1511000020",
        "2,10,7,fav,1511000100",
        "2,13,7,buy,1511000200",
    ]
    (folder / "UserBehavior.csv").write_text("\n".join(rows) + "\n")


def test_movielens_tasks_label_the_same_rows_by_their_threshold(tmp_path: Path) -> None:
    _ml100k(tmp_path)
    engaged, _ = load_task("movielens", tmp_path, Task.engaged)
    loved, _ = load_task("movielens", tmp_path, "loved")
    raw = np.loadtxt(tmp_path / "u.data", dtype=np.int64)
    order = np.argsort(raw[:, 3], kind="stable")
    assert np.array_equal(engaged.item_id, loved.item_id)
    assert np.array_equal(engaged.label, (raw[order, 2] >= 4).astype(np.int8))
    assert np.array_equal(loved.label, (raw[order, 2] == 5).astype(np.int8))
    assert 0 < loved.label.sum() < engaged.label.sum()


def test_taobao_bought_is_buy_only(tmp_path: Path) -> None:
    _taobao(tmp_path)
    engaged, _ = load_task("taobao", tmp_path, "engaged")
    bought, _ = load_task("taobao", tmp_path, "bought")
    assert engaged.label.tolist() == [0, 1, 1, 1, 1]
    assert bought.label.tolist() == [0, 0, 1, 0, 1]


def test_task_impressions_pair_the_vm_task_labels_row_by_row(tmp_path: Path) -> None:
    _ml100k(tmp_path)
    pair = task_impressions("movielens", tmp_path, "engaged", "loved", ConvertConfig(k=10))
    imps = pair.impressions
    assert len(imps) > 0 and pair.vm_label.shape == imps.label.shape
    # a loved item is an engaged one; the converse fails somewhere (4-star ratings)
    assert np.all(pair.vm_label <= imps.label)
    assert pair.vm_label.sum() < imps.label.sum()
    # each impression's VM label is the max over that request's ratings of the item
    raw = np.loadtxt(tmp_path / "u.data", dtype=np.int64)
    loved = {(u, i) for u, i, r, _ in raw if r == 5}
    rows = zip(imps.user_id.tolist(), imps.item_id.tolist(), pair.vm_label.tolist(), strict=True)
    assert all((user, item) in loved for user, item, label in rows if label)
    assert pair.metadata["vm_task"] == {"name": "loved", "label": "rating >= 4.5"}
    assert pair.metadata["vm_task_positive_share"] == pytest.approx(float(pair.vm_label.mean()))


def test_unknown_and_identical_tasks_are_refused_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="movielens has no task 'bought'; it has: engaged, loved"):
        task_rule("movielens", "bought")
    with pytest.raises(ConfigError, match="no tasks defined for dataset 'log'"):
        task_rule("log", "engaged")
    with pytest.raises(ConfigError, match="not cross-task"):
        task_impressions("movielens", tmp_path, "loved", "loved")


def test_the_pairs_traffic_file_holds_its_rows_with_the_fm_tasks_labels(tmp_path: Path) -> None:
    """The serving engine replays this file and matches its rows to the experiment's by
    (user, item, request time, label): every impression must be there with the FM task's label."""
    from models.cross_task import write_pair_traffic
    from models.data.traffic import load_traffic

    _ml100k(tmp_path)
    pair = task_impressions("movielens", tmp_path, "engaged", "loved", ConvertConfig(k=10))
    back = load_traffic(write_pair_traffic(pair, tmp_path / "t.avro")).impressions
    imps = pair.impressions

    def rows(x: object) -> list[tuple[int, int, int, int]]:
        cols = (x.user_id, x.item_id, x.event_time_ms, x.label)  # type: ignore[attr-defined]
        return sorted(zip(*(c.tolist() for c in cols), strict=True))

    assert rows(back) == rows(imps)
    assert pair.requests is not None and len(load_traffic(tmp_path / "t.avro").requests) == len(
        pair.requests
    )
