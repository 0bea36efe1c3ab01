"""Tasks: two label rules over the same interaction log, for cross-task transfer (issue 22 item 4).

The paper's other claim is that an FM trained on one task helps a VM trained on another, where
distilling the FM's head cannot (the head answers the FM's task). A *task* here is a label rule
applied to the same rows of a real log, so the requests, candidates and impressions of two tasks
are identical and only the labels differ:

- MovieLens: ``engaged`` = rating ≥ 4 (the default everywhere), ``loved`` = rating ≥ 4.5
  (5 stars on the integer releases);
- Taobao: ``engaged`` = cart, fav or buy (the default), ``bought`` = buy only.

``task_impressions`` converts the log once per task and checks, row by row, that the two
conversions agree on everything but the label before it hands out one table with both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from models.data.columns import Impressions as TrafficImpressions
from models.data.columns import Requests as TrafficRequests
from models.data.convert import ConvertConfig, conversion_metadata, convert
from models.data.errors import ConfigError, DataError
from models.data.loaders import (
    LIKED_RATING,
    TAOBAO_BEHAVIORS,
    Interactions,
    LoadReport,
    load_movielens,
    load_taobao,
)


class Task(StrEnum):
    """A label rule; which ones a dataset has is in :data:`TASKS`."""

    engaged = "engaged"
    loved = "loved"
    bought = "bought"


@dataclass(frozen=True, slots=True)
class TaskRule:
    """How one dataset's raw value becomes a 0/1 label, in words for the report."""

    describe: str
    liked_rating: float = LIKED_RATING
    behaviors: Mapping[str, int] | None = None


TASKS: dict[str, dict[Task, TaskRule]] = {
    "movielens": {
        Task.engaged: TaskRule(f"rating >= {LIKED_RATING:g}"),
        Task.loved: TaskRule("rating >= 4.5", liked_rating=4.5),
    },
    "taobao": {
        Task.engaged: TaskRule("cart, fav or buy", behaviors=TAOBAO_BEHAVIORS),
        Task.bought: TaskRule("buy", behaviors={"pv": 0, "fav": 0, "cart": 0, "buy": 1}),
    },
}


def task_rule(dataset: str, task: Task | str) -> TaskRule:
    """The rule for ``task`` on ``dataset``; a clear error naming the ones it has."""
    rules = TASKS.get(dataset)
    if rules is None:
        raise ConfigError(f"no tasks defined for dataset {dataset!r}; known: {', '.join(TASKS)}")
    try:
        return rules[Task(task)]
    except (ValueError, KeyError):
        raise ConfigError(
            f"{dataset} has no task {task!r}; it has: {', '.join(t.value for t in rules)}"
        ) from None


def load_task(dataset: str, data_dir: Path, task: Task | str) -> tuple[Interactions, LoadReport]:
    """The dataset's log with ``task``'s labels."""
    rule = task_rule(dataset, task)
    if dataset == "movielens":
        return load_movielens(Path(data_dir), liked_rating=rule.liked_rating)
    return load_taobao(Path(data_dir), rule.behaviors or TAOBAO_BEHAVIORS)


@dataclass(frozen=True, slots=True)
class TaskPair:
    """The converted impressions of the FM's task, and the VM's labels on the same rows."""

    impressions: TrafficImpressions
    vm_label: np.ndarray  # int8 [m], aligned with ``impressions``
    metadata: dict[str, Any]
    #: the FM task's requests (with ``impressions``, the traffic the serving engine replays)
    requests: TrafficRequests | None = None


def _same_rows(a: Interactions, b: Interactions) -> None:
    for col in ("user_id", "item_id", "ts_ms"):
        if not np.array_equal(getattr(a, col), getattr(b, col)):
            raise DataError(f"the two tasks' logs differ in {col}: not the same rows")


def task_impressions(
    dataset: str,
    data_dir: Path,
    fm_task: Task | str,
    vm_task: Task | str,
    config: ConvertConfig | None = None,
) -> TaskPair:
    """Convert ``dataset`` under both tasks and pair the VM task's labels with the FM task's rows.

    Conversion never reads labels (grouping, retrieval and candidate draws depend on users,
    items and times only), so the two conversions must match row by row; a mismatch is a
    :class:`DataError`, never a silent misalignment.
    """
    if Task(fm_task) == Task(vm_task):
        raise ConfigError(f"FM and VM tasks are both {fm_task!r}: that is not cross-task")
    cfg = config or ConvertConfig()
    fm_log, report = load_task(dataset, data_dir, fm_task)
    vm_log, _ = load_task(dataset, data_dir, vm_task)
    _same_rows(fm_log, vm_log)
    fm_reqs, fm_imps = convert(fm_log, cfg, dataset=dataset)
    _, vm_imps = convert(vm_log, cfg, dataset=dataset)
    if not (
        np.array_equal(fm_imps.request_id, vm_imps.request_id)
        and np.array_equal(fm_imps.item_id, vm_imps.item_id)
    ):
        raise DataError("the two tasks' conversions differ in requests or items")
    meta = conversion_metadata(fm_log, cfg, dataset)
    meta.update(
        {
            "source_file": report.path,
            "fm_task": {"name": Task(fm_task).value, "label": task_rule(dataset, fm_task).describe},
            "vm_task": {"name": Task(vm_task).value, "label": task_rule(dataset, vm_task).describe},
            "fm_task_positive_share": float(fm_imps.label.mean()) if len(fm_imps) else 0.0,
            "vm_task_positive_share": float(vm_imps.label.mean()) if len(vm_imps) else 0.0,
        }
    )
    return TaskPair(fm_imps, vm_imps.label.copy(), meta, fm_reqs)
