"""Speculate step: a batch of requests proposes pairs to embed and updates each user's
representation and pair memory.

Both drivers call :func:`speculate_step`: the live speculate agent on each batch of ``requests``
(split only where a neighbour refresh falls due, which runs between requests at event time), the
simulator on each request as a batch of one. A user's stored state is loaded once per batch and
carried from one of its requests to the next inside the step; the step returns what to persist.
A request the step cannot process is refused alone (``isolate``) and changes no stored state.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas.records import ProposalBatch, RequestEvent
from streams.engine.errors import StepError
from streams.engine.history import Entry
from streams.engine.ledger import Confirmed
from streams.engine.neighbours import UserRepresentations
from streams.engine.packed import FLOAT32, pack, unpack
from streams.engine.recurrence import PairMemory
from streams.engine.stages import Stages, recorded
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

    Also remembers the request's candidates *after* proposing (the pair memory, and the item
    prior that counts the memories' lists), then attaches each proposal's inputs as of this
    request (the verify step ranks by them, so it never reads the prior: a pure function of the
    message and the ledger).
    """
    chosen, strategies = stages.speculator.choose(
        rec, ledger, confirmed, recent_positive_items(entries)
    )
    prior, t = stages.prior, rec.event_time_ms
    if memory is not None:
        remembered = memory.remember(rec.request_id, rec.candidates, t)
        if prior is not None:
            prior.replace(memory, remembered)
        memory = remembered
    elif prior is not None:
        raise RuntimeError("the item prior counts the pair memories: the step needs the memory")
    if not chosen:
        return None, memory
    items = tuple(chosen)
    prior_counts: tuple[float, ...] = ()
    pair_counts: tuple[int, ...] = ()
    if prior is not None or memory is not None:  # as of this request, its own list counted
        zeros = np.zeros(len(items))
        prior_counts = tuple((zeros if prior is None else prior.raw_counts(items)).tolist())
        window = stages.pair_memory_ms
        pairs = zeros if memory is None or window is None else memory.pair_counts(items, t, window)
        pair_counts = tuple(pairs.astype(np.int64).tolist())
    batch = ProposalBatch(
        rec.request_id,
        rec.user_id,
        t,
        len(rec.candidates),
        items,
        tuple(strategies),
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
        """``[packed float32 vector, seen at, version tag]`` (the vector's values are float32:
        the representations are)."""
        return [pack(self.vector, FLOAT32), self.seen_at_ms, self.version_tag]

    @classmethod
    def from_json(cls, value: Any) -> SavedRep | None:
        """A table value; one written before 2026-12-07 holds the vector as a JSON list."""
        if not value:
            return None
        tag = value[2] if len(value) > 2 and value[2] is not None else None
        raw = value[0]
        vector = unpack(raw, FLOAT32).tolist() if isinstance(raw, str) else [float(x) for x in raw]
        return cls(vector, int(value[1]), None if tag is None else int(tag))


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
    reps: UserRepresentations,
    rec: RequestEvent,
    saved: SavedRep | None,
    horizon_ms: int,
    of_items: np.ndarray | None = None,
) -> SavedRep | None:
    """Fold the request's candidates into the user's representation.

    ``saved`` is the persisted value: restored when this process does not hold the user (after
    a restart or a rebalance). Returns the value to persist, or None when nothing changed: a
    redelivered request (not newer than the saved one) is not folded in twice.

    A representation last seen more than ``horizon_ms`` before the request (the neighbour
    tier's horizon: refreshes forget such users' in-memory representations) is not blended in:
    the user starts afresh. So what a returning user gets does not depend on whether a refresh
    ran in between, and a saved value past the horizon is equivalent to none (the table sweep
    may delete it: :mod:`streams.engine.steps.expiry`). ``of_items``: the candidates' mean
    item vector when the step computed it for the whole batch.
    """
    if saved is not None and not reps.has(rec.user_id):
        restored = restore_representation(reps, rec.user_id, saved)
        saved = saved if restored else None  # another model's: start afresh
    if saved is not None and rec.event_time_ms <= saved.seen_at_ms:
        return None
    seen = reps.seen_at(rec.user_id)
    if seen is not None and rec.event_time_ms - seen > horizon_ms:
        reps.forget(rec.user_id)
    reps.observe(rec.user_id, rec.candidates, rec.event_time_ms, of_items)
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
    of_items: np.ndarray | None = None,
) -> RequestOutcome:
    """One request's speculate-side rules, in the order both drivers run them: propose pairs
    (feeding the recurrence inputs), then fold the candidates into the user's representation.
    ``stored`` loads the user's persisted state, each part only when a stage reads it;
    ``of_items``: the candidates' mean item vector, computed for the batch."""
    memory = stored.memory() if stages.pair_memory_ms is not None else None
    proposals, remembered = speculate(rec, ledger, confirmed, entries, memory, stages)
    changed = remembered if remembered is not memory else None
    reps = stages.reps
    if reps is None:
        return RequestOutcome(proposals, None, memory=changed)
    before = reps.foreign
    rep = observe_representation(reps, rec, stored.rep(), horizon_ms, of_items)
    return RequestOutcome(proposals, rep, reps.foreign - before, changed)


@dataclass(frozen=True, slots=True)
class StoredUserState:
    """Loaders of the user's persisted speculate-side state (the driver's tables or dicts),
    called only when a stage needs that part."""

    rep: Callable[[], SavedRep | None]
    memory: Callable[[], PairMemory]


@dataclass(frozen=True, slots=True)
class SpeculateInputs:
    """Per-user loaders of the stored state the speculate step reads (the live agent's tables,
    the simulator's dicts). The step calls each at most once per user and batch, and only when a
    stage reads that part."""

    ledger: Callable[[int], dict[int, int]]
    #: the embeddings that came back (:mod:`streams.engine.ledger`), for a user's ledger marks
    #: past the in-flight timeout
    confirmed: Callable[[int], Container[tuple[int, int]]]
    entries: Callable[[int], list[Entry]]
    rep: Callable[[int], SavedRep | None]
    memory: Callable[[int], PairMemory]


@dataclass(slots=True)
class SpeculateResult:
    """What one batch of requests made: proposals to verify, state to persist, and refusals."""

    #: ``(index in the batch, proposals)`` of each request that proposed pairs, in batch order
    proposals: list[tuple[int, ProposalBatch]] = field(default_factory=list)
    #: each user's representation to persist (its value after the batch's last change)
    reps: dict[int, SavedRep] = field(default_factory=dict)
    #: each user's pair memory to persist
    memories: dict[int, PairMemory] = field(default_factory=dict)
    #: user -> index of the batch's last request that changed its representation or memory
    #: (the live agent writes the tables in that request's partition)
    changed_at: dict[int, int] = field(default_factory=dict)
    #: ``(index in the batch, why)`` of each request not processed
    refused: list[tuple[int, Exception]] = field(default_factory=list)
    #: saved representations refused as another model's while restoring users
    foreign_resets: int = 0
    #: proposals per strategy
    strategies: Counter[str] = field(default_factory=Counter)


class _BatchUsers:
    """The stored state of the batch's users, each part loaded once and then carried along."""

    def __init__(self, inputs: SpeculateInputs, result: SpeculateResult) -> None:
        self.inputs, self.result = inputs, result
        self.cache: dict[tuple[str, int], Any] = {}

    def get(self, part: str, user: int) -> Any:
        key = (part, user)
        try:
            return self.cache[key]
        except KeyError:
            value = self.cache[key] = getattr(self.inputs, part)(user)
            return value

    def stored(self, user: int) -> StoredUserState:
        """The user's representation and memory as of the batch so far."""
        result = self.result
        rep = result.reps.get(user)
        memory = result.memories.get(user)
        return StoredUserState(
            (lambda: rep) if rep is not None else (lambda: self.get("rep", user)),
            (lambda: memory) if memory is not None else (lambda: self.get("memory", user)),
        )


def speculate_step(
    requests: Sequence[RequestEvent],
    inputs: SpeculateInputs,
    stages: Stages,
    horizon_ms: int,
    isolate: tuple[type[Exception], ...] = (StepError,),
) -> SpeculateResult:
    """Speculate every request of the batch in order (:func:`request_step` each), the user's
    representation and pair memory carried from one of its requests to the next.

    A request raising one of ``isolate`` is refused alone and changes nothing: no stored state,
    and what it had fed the item prior and the representations (process state) is undone
    (:func:`~streams.engine.stages.recorded`; the driver's
    :func:`~streams.engine.stages.undone_on_error` undoes a whole failed batch). The simulator
    isolates only :class:`StepError`; the live agent isolates any error of one request (a
    poison message costs only itself)."""
    result = SpeculateResult()
    users = _BatchUsers(inputs, result)
    means = _item_means(stages.reps, requests)
    with recorded(stages) as undo:
        for index, rec in enumerate(requests):
            user = rec.user_id
            mark = undo.savepoint() if undo is not None else 0
            try:
                out = request_step(
                    rec,
                    users.get("ledger", user),
                    functools.partial(users.get, "confirmed", user),
                    users.get("entries", user),
                    users.stored(user),
                    stages,
                    horizon_ms,
                    None if means is None else means[index],
                )
            except isolate as exc:
                if undo is not None:
                    undo.rollback_to(mark)
                result.refused.append((index, exc))
                continue
            _record(result, index, user, out)
    return result


def _item_means(
    reps: UserRepresentations | None, requests: Sequence[RequestEvent]
) -> np.ndarray | None:
    """Every request's candidate mean item vector, for the whole batch at once (None: no
    neighbour tier, or a request whose candidates cannot be looked up: each request then
    computes its own inside its isolation, so such a request is refused alone)."""
    if reps is None:
        return None
    try:
        return reps.of_items_many([rec.candidates for rec in requests])
    except (TypeError, ValueError, OverflowError):
        return None


def _record(result: SpeculateResult, index: int, user: int, out: RequestOutcome) -> None:
    result.foreign_resets += out.foreign_resets
    if out.rep is not None:
        result.reps[user] = out.rep
        result.changed_at[user] = index
    if out.memory is not None:
        result.memories[user] = out.memory
        result.changed_at[user] = index
    if out.proposals is not None:
        result.proposals.append((index, out.proposals))
        result.strategies.update(out.proposals.strategies)
