"""The engine's stage objects for one driver, built in one place from config and models.

The simulator and each Faust worker process used to wire speculator, verifier, embedder,
aggregator and representations separately (two copies that could drift); both now call
:func:`build_stages`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from store.values import version_tag
from streams.engine.aggregator import RollingAggregator
from streams.engine.embedder import Embedder
from streams.engine.lookahead import Lookahead
from streams.engine.models import EngineModels
from streams.engine.neighbours import UserRepresentations
from streams.engine.recurrence import PAIR_RANKINGS, PRIOR_RANKINGS, ItemPrior
from streams.engine.speculator import Speculator, SpeculatorConfig
from streams.engine.undo import UndoLog
from streams.engine.verifier import Verifier, VerifierConfig


@dataclass(frozen=True, slots=True)
class Stages:
    """Stateful helpers of the steps (their per-user state lives with the driver)."""

    speculator: Speculator
    lookahead: Lookahead | None
    #: fed and read by the speculate step only (it attaches each proposal's recurrence inputs
    #: to the proposals); None when the ranking reads no item prior
    prior: ItemPrior | None
    #: how long a candidate list counts in the users' pair memory (the drivers load and store
    #: it); None when the ranking reads neither it nor the item prior (which counts its lists)
    pair_memory_ms: int | None
    #: None = every proposal goes to the FM (no VM, or an oracle run)
    verifier: Verifier | None
    embedder: Embedder
    aggregator: RollingAggregator
    #: None = no neighbour tier (no item vectors, or switched off)
    reps: UserRepresentations | None


Held = ItemPrior | UserRepresentations | Lookahead  #: in-process state under an undo log


def _held(stages: Stages) -> list[Held]:
    """What the speculate step changes (the look-ahead is the history step's: its agent
    undoes it, :func:`rolled_back_on_error`)."""
    return [s for s in (stages.prior, stages.reps) if s is not None]


@contextmanager
def _recording(held: Sequence[Held]) -> Iterator[UndoLog]:
    """A fresh log recording every change of ``held`` until the block ends."""
    undo = UndoLog()
    for state in held:
        state.begin(undo)
    try:
        yield undo
    finally:
        for state in held:
            state.end()


@contextmanager
def undone_on_error(stages: Stages) -> Iterator[UndoLog]:
    """Run one batch of the speculate step so that an exception leaves the in-process state
    (item prior, user representations) as before the batch: the live driver runs a
    failed batch again, whole (:mod:`streams.engine.undo`). Not reentrant."""
    with rolled_back_on_error(_held(stages)) as undo:
        yield undo


@contextmanager
def rolled_back_on_error(held: Sequence[Held]) -> Iterator[UndoLog]:
    """Record every change of ``held`` over the block; an exception restores them all."""
    with _recording(held) as undo:
        try:
            yield undo
        except BaseException:
            undo.rollback()
            raise


@contextmanager
def recorded(stages: Stages) -> Iterator[UndoLog | None]:
    """The undo log of the in-process state over one step call, for the step to undo a request
    it refuses: the driver's batch log when :func:`undone_on_error` opened one, else a log of
    the call's own (its changes kept at the end). None when no stage holds such state."""
    held = _held(stages)
    outer = held[0].undo if held else None
    if not held or outer is not None:
        yield outer
        return
    with _recording(held) as undo:
        yield undo


def build_stages(
    speculator: SpeculatorConfig,
    verifier: VerifierConfig,
    models: EngineModels,
    aggregate_window_ms: int,
    aggregate_bucket_ms: int,
    verify: bool = True,
    use_neighbours: bool = True,
    aggregate_max_keys: int = 0,
) -> Stages:
    """The stages of one driver; ``verify``/``use_neighbours`` switch those steps off."""
    lookahead = Lookahead() if "lookahead" in speculator.strategies else None
    # the item prior counts the lists the pair memories hold, so a ranking that reads it keeps
    # them too (over the same window)
    with_prior = verifier.rank_by in PRIOR_RANKINGS
    memory_ms = verifier.pair_memory_ms
    return Stages(
        speculator=Speculator(speculator, lookahead),
        lookahead=lookahead,
        prior=ItemPrior(memory_ms) if with_prior else None,
        pair_memory_ms=memory_ms if with_prior or verifier.rank_by in PAIR_RANKINGS else None,
        verifier=Verifier(models.vm, verifier) if verify and models.vm is not None else None,
        embedder=Embedder(models.fm, split=models.state),
        aggregator=RollingAggregator(
            aggregate_window_ms,
            aggregate_bucket_ms,
            own=(models.fm.model_version, models.fm.dim),
            max_keys=aggregate_max_keys,
        ),
        reps=UserRepresentations(models.items, version_tag=version_tag(models.fm.model_version))
        if use_neighbours and models.items is not None
        else None,
    )
