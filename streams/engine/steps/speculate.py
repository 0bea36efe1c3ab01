"""Speculate step: a request proposes pairs to embed and updates the user's representation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.records import ProposalBatch, RequestEvent
from streams.engine.history import Entry
from streams.engine.ledger import Confirmed
from streams.engine.neighbours import UserRepresentations
from streams.engine.recurrence import PairMemory
from streams.engine.stages import Stages
from streams.engine.steps.history import recent_positive_items


def speculate(
    rec: RequestEvent,
    ledger: dict[int, int],
    confirmed: Confirmed,
    entries: list[Entry],
    memory: PairMemory | None,
    stages: Stages,
) -> tuple[ProposalBatch | None, PairMemory | None]:
    """The request's proposals as one batch (None when nothing needs embedding), and the
    user's pair memory with this request remembered (None when the ranking reads none).
    ``confirmed``: the user's embeddings that came back (:mod:`streams.engine.ledger`), loaded
    on demand; ``memory``: the user's stored pair memory (None: the ranking reads none).

    Also feeds the recurrence inputs with the request's candidates *after* proposing, then
    attaches each proposal's inputs as of this request (the verify step ranks by them, so it
    never reads the prior: a pure function of the message and the ledger).
    """
    proposals = stages.speculator.propose(rec, ledger, confirmed, recent_positive_items(entries))
    prior, t = stages.prior, rec.event_time_ms
    if prior is not None:
        prior.observe(rec.candidates, t)
    if memory is not None:
        memory = memory.remember(rec.request_id, rec.candidates, t)
    if not proposals:
        return None, memory
    items = tuple(p.item_id for p in proposals)
    prior_counts: tuple[float, ...] = ()
    pair_counts: tuple[int, ...] = ()
    if prior is not None or memory is not None:  # as of this request, its own list counted
        zeros = np.zeros(len(items))
        prior_counts = tuple((zeros if prior is None else prior.raw_counts(items)).tolist())
        window = stages.pair_memory_ms
        pairs = zeros if memory is None or window is None else memory.pair_counts(items, t, window)
        pair_counts = tuple(int(c) for c in pairs)
    batch = ProposalBatch(
        rec.request_id,
        rec.user_id,
        t,
        len(rec.candidates),
        items,
        tuple(p.strategy for p in proposals),
        prior_counts=prior_counts,
        pair_counts=pair_counts,
    )
    return batch, memory


@dataclass(frozen=True, slots=True)
class SavedRep:
    """A user's representation as persisted between events (a Faust table value)."""

    vector: list[float]
    seen_at_ms: int
    #: CRC32 tag of the model version whose item vectors built it (``store.values.version_tag``);
    #: None = saved before values carried it
    version_tag: int | None = None

    def to_json(self) -> list[object]:
        return [self.vector, self.seen_at_ms, self.version_tag]

    @classmethod
    def from_json(cls, value: Any) -> SavedRep | None:
        if not value:
            return None
        tag = value[2] if len(value) > 2 and value[2] is not None else None
        return cls([float(x) for x in value[0]], int(value[1]), None if tag is None else int(tag))


def restore_representation(reps: UserRepresentations, user_id: int, saved: SavedRep) -> bool:
    """Put ``saved`` back into ``reps`` (after a restart or a rebalance). Refused and counted
    (``reps.foreign``) when another model's item vectors built it: another version tag (an
    upgrade that kept the dimension would otherwise mix two spaces silently), no tag while
    ``reps`` has one, or another dimension (issue 24, item 4). The user then starts afresh."""
    if reps.version_tag is not None and saved.version_tag != reps.version_tag:
        reps.foreign += 1
        return False
    if not reps.set(user_id, np.asarray(saved.vector, np.float32), saved.seen_at_ms):
        reps.foreign += 1
        return False
    return True


def observe_representation(
    reps: UserRepresentations, rec: RequestEvent, saved: SavedRep | None, horizon_ms: int
) -> SavedRep | None:
    """Fold the request's candidates into the user's representation.

    ``saved`` is the persisted value: restored when this process does not hold the user (after
    a restart or a rebalance). Returns the value to persist, or None when nothing changed: a
    redelivered request (not newer than the saved one) is not folded in twice.

    A representation last seen more than ``horizon_ms`` before the request (the neighbour
    tier's horizon: refreshes forget such users' in-memory representations) is not blended in:
    the user starts afresh. So what a returning user gets does not depend on whether a refresh
    ran in between, and a saved value past the horizon is equivalent to none (the table sweep
    may delete it: :mod:`streams.engine.steps.expiry`).
    """
    if saved is not None and not reps.has(rec.user_id):
        restored = restore_representation(reps, rec.user_id, saved)
        saved = saved if restored else None  # another model's: start afresh
    if saved is not None and rec.event_time_ms <= saved.seen_at_ms:
        return None
    seen = reps.seen_at(rec.user_id)
    if seen is not None and rec.event_time_ms - seen > horizon_ms:
        reps.forget(rec.user_id)
    reps.observe(rec.user_id, rec.candidates, rec.event_time_ms)
    return SavedRep(reps.vector(rec.user_id).tolist(), rec.event_time_ms, reps.version_tag)


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """What :func:`request_step` made of one request."""

    #: the proposals to verify (None: nothing needs embedding)
    proposals: ProposalBatch | None
    #: the user's representation to persist (None: unchanged, or no neighbour tier)
    rep: SavedRep | None
    #: saved representations refused as another model's while restoring this user's
    foreign_resets: int = 0
    #: the user's pair memory to persist (None: unchanged, or the ranking reads none)
    memory: PairMemory | None = None


def request_step(
    rec: RequestEvent,
    ledger: dict[int, int],
    confirmed: Confirmed,
    entries: list[Entry],
    stored: StoredUserState,
    stages: Stages,
    horizon_ms: int,
) -> RequestOutcome:
    """One request's speculate-side rules, in the order both drivers run them: propose pairs
    (feeding the recurrence inputs), then fold the candidates into the user's representation.
    ``stored`` loads the user's persisted state, each part only when a stage reads it."""
    memory = stored.memory() if stages.pair_memory_ms is not None else None
    proposals, remembered = speculate(rec, ledger, confirmed, entries, memory, stages)
    changed = remembered if remembered is not memory else None
    reps = stages.reps
    if reps is None:
        return RequestOutcome(proposals, None, memory=changed)
    before = reps.foreign
    rep = observe_representation(reps, rec, stored.rep(), horizon_ms)
    return RequestOutcome(proposals, rep, reps.foreign - before, changed)


@dataclass(frozen=True, slots=True)
class StoredUserState:
    """Loaders of the user's persisted speculate-side state (the driver's tables or dicts),
    called only when a stage needs that part."""

    rep: Callable[[], SavedRep | None]
    memory: Callable[[], PairMemory]
