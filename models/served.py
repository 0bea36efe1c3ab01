"""The contract between training and the serving engine: what the ranker would read per row.

``vm_solaris`` must learn from the feature distribution it is served. The serving engine
(speculate → verify → embed → aggregate → neighbours → reader) lives above this package
(``streams``), so training receives it as a :class:`ServedTierSource`: given the seed's freshly
trained FM and VM, it replays the traffic through the engine and returns, for each requested
labelled impression, the tier and vector the ranker's reader served at that request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from models.features import Vocab
from models.split import TimeSplit

if TYPE_CHECKING:  # annotations only: the serving path imports this module without torch
    from models.fm import FoundationModel
    from models.vm import VerticalModel


@dataclass(frozen=True)
class RowKeys:
    """Labelled impressions to look up, aligned with the caller's rows."""

    user: np.ndarray  #: int64 [N]
    item: np.ndarray  #: int64 [N]
    time_ms: np.ndarray  #: int64 [N]: the request's event time
    label: np.ndarray  #: int8 [N]


@dataclass(frozen=True)
class TrainedModels:
    """One seed's models, as the engine needs them (exported to ONNX by the source)."""

    fm: FoundationModel
    fm_vocab: Vocab
    vm: VerticalModel
    user_vocab: Vocab
    item_vocab: Vocab
    history_len: int
    dim: int


@dataclass(frozen=True)
class ServedRows:
    """Per requested row: tier code (int64 [N]) and served vector (float32 [N, d], zeros when
    missing); ``found`` [N] is False for rows the engine never ranked (served as missing)."""

    tier: np.ndarray
    vector: np.ndarray
    found: np.ndarray
    coverage: dict[str, float]


class ServedTierSource(Protocol):
    """Runs the serving engine over the training traffic. Blocking (a full simulation)."""

    #: identifies the engine knobs (part of the bundle cache key: other knobs, other features)
    cache_key: str

    def __call__(self, models: TrainedModels, split: TimeSplit, rows: RowKeys) -> ServedRows: ...
