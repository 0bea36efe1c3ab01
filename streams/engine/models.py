"""The models one engine needs, behind their Protocols (ONNX runners in production)."""

from __future__ import annotations

from dataclasses import dataclass

from streams.engine.embedder import EmbeddingModel
from streams.engine.neighbours import ItemVectors
from streams.engine.ranker import SolarisScorer
from streams.engine.steps.state import StateModel
from streams.engine.verifier import HistoryPairScorer, PairScorer


@dataclass(frozen=True, slots=True)
class EngineModels:
    """The models a run needs; ``vm``/``solaris``/``items``/``state`` may be None (then that
    step is off; ``state`` is the state tier's split FM)."""

    fm: EmbeddingModel
    vm: PairScorer | None = None
    solaris: SolarisScorer | None = None
    items: ItemVectors | None = None
    state: StateModel | None = None
    #: the fair ranking VM (streaming user features): not run by any step, the baseline the
    #: simulator's transfer ratios are measured against (None: the bundle has none)
    vm_fair: HistoryPairScorer | None = None
