"""What the offline experiment reads and writes per seed: labelled impressions (columnar,
time-sorted, refused when a part has one class) and one seed's run (split, test predictions,
tuned grid points, models)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.blend import Blend
from models.config import GridPoint
from models.data.errors import OneClassLabels
from models.features import Vocab
from models.fm import FoundationModel
from models.split import TimeSplit
from models.train import Examples
from models.vm import VerticalModel


@dataclass(frozen=True)
class Impressions:
    """Labelled impressions, columnar (any order; sorted by time on construction)."""

    user_id: np.ndarray  # int64 [N]
    item_id: np.ndarray  # int64 [N]
    event_time_ms: np.ndarray  # int64 [N]
    label: np.ndarray  # int8 [N]
    #: cross-task transfer: the VMs' label on the same rows (the FM learns ``label``); None =
    #: one task for every model
    task_label: np.ndarray | None = None

    @classmethod
    def from_columns(cls, cols: Any, task_label: np.ndarray | None = None) -> Impressions:
        """From part A's ``load_impressions`` view (attributes or mapping keys), time-sorted;
        ``task_label`` (aligned with ``cols``) is the VMs' task when it differs from the FM's."""

        def col(name: str) -> np.ndarray:
            if isinstance(cols, Mapping):
                return np.asarray(cols[name])
            return np.asarray(getattr(cols, name))

        t = col("event_time_ms").astype(np.int64)
        order = np.argsort(t, kind="stable")
        task = None if task_label is None else np.asarray(task_label).astype(np.int8)[order]
        return cls(
            col("user_id").astype(np.int64)[order],
            col("item_id").astype(np.int64)[order],
            t[order],
            col("label").astype(np.int8)[order],
            task,
        )

    @property
    def vm_label(self) -> np.ndarray:
        """What the VMs learn and are judged on: the task label, or the FM's label."""
        return self.label if self.task_label is None else self.task_label

    def examples(self) -> Examples:
        return Examples(self.user_id, self.item_id, self.event_time_ms, self.label)


@dataclass
class SeedRun:
    """Everything one seed produced (models kept for export)."""

    seed: int
    split: TimeSplit
    test_probs: dict[str, np.ndarray]
    tuned: dict[str, GridPoint]
    fm: FoundationModel
    fm_vocab: Vocab
    user_vocab: Vocab
    item_vocab: Vocab
    vms: dict[str, VerticalModel]
    seconds: dict[str, float] = field(default_factory=dict)
    aggregate_share: dict[str, float] = field(default_factory=dict)
    #: tier shares the serving engine produced over B ∪ C (engine-built training only)
    engine_coverage: dict[str, float] = field(default_factory=dict)
    #: logit blends fitted on the VMs' validation rows (models.blend), by the model they make
    blends: dict[str, Blend] = field(default_factory=dict)


def require_both_labels(labels: np.ndarray, parts: dict[str, np.ndarray]) -> None:
    """Refuse data where a part has only positives or only negatives, before anything trains:
    a click log read without a label column (every row a positive) otherwise trains for many
    minutes and reports transfer ratios of -0.0 (issue 25)."""
    for name, rows in parts.items():
        y = labels[rows]
        if len(y) and y.min() == y.max():
            kind = "a positive" if y[0] else "a negative"
            raise OneClassLabels(
                f"every one of the {len(y)} {name} impressions is {kind}: log-loss, NE, AUC "
                "and transfer ratios are undefined. A click log without a label column reads "
                "every row as a positive; give a log that records what was shown and not "
                "engaged (a 0/1 label column, --columns ...,label=COL, or ratings with "
                "--label-threshold; MIND behaviors.tsv has both)"
            )
