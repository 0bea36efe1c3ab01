"""Rows parsed from a user's log → :class:`Interactions`, with ids made integers.

Logs name users and items by text ("U13740", "N55189", a SKU) or by number. The pipeline's
records need non-negative int64 ids, so each id column is encoded on its own:

* ``native`` — every id is a non-negative integer below 2**63 that prints back as itself
  (no "007"): the ids are kept, so traffic and stored embeddings use the log's own ids;
* ``dense`` — otherwise the distinct ids, **sorted as text**, are numbered 0, 1, 2, …; sorting
  (not first appearance) makes the numbering independent of row order, so the same set of ids
  always gets the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from models.data.loaders import Interactions, LoadReport
from models.data.log_spec import NoUsableRows

IdEncoding = Literal["native", "dense"]
_INT64_MAX = 2**63 - 1


@dataclass(slots=True)
class RawRows:
    """Accepted rows, column by column, in file order (ids still as text)."""

    users: list[str] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    times_ms: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)

    def add(self, user: str, item: str, ts_ms: int, label: int) -> None:
        self.users.append(user)
        self.items.append(item)
        self.times_ms.append(ts_ms)
        self.labels.append(label)

    def __len__(self) -> int:
        return len(self.users)


def encode_ids(keys: list[str]) -> tuple[np.ndarray, IdEncoding]:
    """int64[n] ids for ``keys`` and how they were made (see the module docstring)."""
    distinct = sorted(set(keys))
    if all(key.isdigit() and str(int(key)) == key and int(key) <= _INT64_MAX for key in distinct):
        return np.array([int(key) for key in keys], dtype=np.int64), "native"
    number = {key: i for i, key in enumerate(distinct)}
    return np.array([number[key] for key in keys], dtype=np.int64), "dense"


@dataclass(frozen=True, slots=True, eq=False)
class UserLog:
    """A loaded user log: the interactions, what happened to each row, and how ids were made."""

    interactions: Interactions
    report: LoadReport
    layout: str
    id_encoding: dict[str, IdEncoding]

    def metadata(self) -> dict[str, object]:
        """What a traffic file records about its source log (paths, counts, skip reasons)."""
        labels = self.interactions.label
        return {
            "source_file": self.report.path,
            "log_layout": self.layout,
            "rows_read": self.report.rows_read,
            "rows_loaded": self.report.rows_loaded,
            "rows_skipped": dict(self.report.skipped),
            "id_encoding": dict(self.id_encoding),
            "positive_share": float(labels.mean()) if len(labels) else 0.0,
        }


def build_user_log(name: str, rows: RawRows, report: LoadReport, layout: str) -> UserLog:
    """Encode ids and sort by time; ``NoUsableRows`` (naming the skip reasons) if none was kept."""
    report.log()
    if not rows:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(report.skipped.items())) or "empty file"
        raise NoUsableRows(
            f"{report.path}: no usable rows out of {report.rows_read} ({reasons}); check "
            "--columns, --time-unit and --label-threshold"
        )
    users, user_enc = encode_ids(rows.users)
    items, item_enc = encode_ids(rows.items)
    interactions = Interactions.build(
        name,
        users,
        items,
        np.array(rows.times_ms, dtype=np.int64),
        np.array(rows.labels, dtype=np.int8),
    )
    return UserLog(interactions, report, layout, {"user": user_enc, "item": item_enc})
