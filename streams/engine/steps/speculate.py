"""Speculate step: a request proposes pairs to embed and updates the user's representation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.records import ProposalBatch, RequestEvent
from streams.engine.history import Entry
from streams.engine.neighbours import UserRepresentations
from streams.engine.stages import Stages
from streams.engine.steps.history import recent_positive_items


def speculate(
    rec: RequestEvent, ledger: dict[int, int], entries: list[Entry], stages: Stages
) -> ProposalBatch | None:
    """The request's proposals as one batch (None when nothing needs embedding).

    Also feeds the recurrence prior with the request's candidates *after* proposing, the order
    the verify step relies on.
    """
    proposals = stages.speculator.propose(rec, ledger, recent_positive_items(entries))
    if stages.prior is not None:
        stages.prior.observe(rec.candidates, rec.event_time_ms, rec.user_id)
    if not proposals:
        return None
    return ProposalBatch(
        rec.request_id,
        rec.user_id,
        rec.event_time_ms,
        len(rec.candidates),
        tuple(p.item_id for p in proposals),
        tuple(p.strategy for p in proposals),
    )


@dataclass(frozen=True, slots=True)
class SavedRep:
    """A user's representation as persisted between events (a Faust table value)."""

    vector: list[float]
    seen_at_ms: int

    def to_json(self) -> list[object]:
        return [self.vector, self.seen_at_ms]

    @classmethod
    def from_json(cls, value: Any) -> SavedRep | None:
        if not value:
            return None
        vector, seen = value
        return cls([float(x) for x in vector], int(seen))


def observe_representation(
    reps: UserRepresentations, rec: RequestEvent, saved: SavedRep | None
) -> SavedRep | None:
    """Fold the request's candidates into the user's representation.

    ``saved`` is the persisted value: restored when this process does not hold the user (after
    a restart or a rebalance). Returns the value to persist, or None when nothing changed: a
    redelivered request (not newer than the saved one) is not folded in twice.
    """
    if saved is not None and not reps.has(rec.user_id):
        vector = np.asarray(saved.vector, np.float32)
        restored = reps.set(rec.user_id, vector, saved.seen_at_ms)
        saved = saved if restored else None  # another model's (other dimension): start afresh
    if saved is not None and rec.event_time_ms <= saved.seen_at_ms:
        return None
    reps.observe(rec.user_id, rec.candidates, rec.event_time_ms)
    return SavedRep(reps.vector(rec.user_id).tolist(), rec.event_time_ms)
