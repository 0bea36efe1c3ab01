"""Verify step: the VM filters a request's proposals; survivors go to the FM with the history
known before the request.

Rules that used to live in the Faust agent (so the simulator did not run them):
- a redelivered request (its id is in the user's verified list) yields nothing: verifying it
  again would see its own pairs as fresh and pick the next best ones — extra FM work an
  uninterrupted run never does. Nor does a request older than the user's newest verified one
  (:func:`older_than_verified`): a redelivery whose id has left the list (a burst of more than
  :data:`VERIFIED_REQUESTS_KEPT` of the user's requests inside the uncommitted window), or a
  request too late to matter;
- freshness is re-checked against the ledger: a request speculated before the previous one's
  ledger update landed must not embed the same pairs twice;
- the ledger is returned, not saved: the driver saves it only once the verified batch is
  durably sent, so a crash in between re-verifies instead of skipping;
- a pair whose VM score is not finite (a broken VM output) is dropped by the verifier before
  ranking (``VerifierStats.dropped_nonfinite``), so it takes no valid pair's place and never
  reaches the ledger or a ``verified`` message (which could not be encoded).

Many requests are verified with one VM call. Two requests of one user in the same call would
both miss each other's ledger update, so a user's requests go to successive *rounds*.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from schemas.records import ProposalBatch
from streams.engine.history import Entry, history_before
from streams.engine.ledger import Confirmed, is_fresh, record
from streams.engine.recurrence import RecurrenceInputs
from streams.engine.verifier import Picked, Verifier

#: request ids remembered per user: a redelivery is recognised within the uncommitted window,
#: which holds a handful of a user's requests at most
VERIFIED_REQUESTS_KEPT = 16


@dataclass(frozen=True, slots=True)
class VerifyKnobs:
    refresh_after_ms: int
    pair_ttl_ms: int
    history_len: int
    #: a mark older than this holds only if its vector came back (:mod:`streams.engine.ledger`)
    in_flight_ms: int


@dataclass(slots=True)
class LedgerState:
    """Per user: ``item -> event time embedded`` and the ids of the last verified requests."""

    pairs: dict[int, int] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def copy(self) -> LedgerState:
        return LedgerState(dict(self.pairs), list(self.requests))


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """``out`` is None when nothing goes to the FM; ``ledger`` is None when it is unchanged."""

    out: ProposalBatch | None
    ledger: LedgerState | None
    redelivered: bool = False
    proposed: int = 0
    verified: int = 0
    #: pairs dropped for a NaN or infinite VM score (a broken model; the live agent reports them)
    dropped_nonfinite: int = 0


def fresh_positions(
    b: ProposalBatch, ledger: LedgerState, knobs: VerifyKnobs, confirmed: Confirmed
) -> list[int]:
    """Positions in ``b`` of the proposals whose pair is not fresh in ``ledger``."""
    t, pairs = b.event_time_ms, ledger.pairs
    return [
        k
        for k, item in enumerate(b.item_ids)
        # most items have no ledger mark: only those need the freshness rule
        if item not in pairs
        or not is_fresh(pairs, item, t, knobs.refresh_after_ms, knobs.in_flight_ms, confirmed)
    ]


def recurrence_inputs(b: ProposalBatch, keep: Sequence[int]) -> RecurrenceInputs | None:
    """The recurrence inputs of the proposals at ``keep``, or None when the message carries
    none."""
    if not b.prior_counts:
        return None
    return RecurrenceInputs.of([b.prior_counts[k] for k in keep], [b.pair_counts[k] for k in keep])


def verified_batch(
    b: ProposalBatch,
    kept: Sequence[int],
    scores: Sequence[float],
    entries: list[Entry],
    length: int,
) -> ProposalBatch:
    """The message for the FM: the pairs at positions ``kept`` of ``b`` with their scores, and
    the history strictly before ``b``."""
    hist = history_before(entries, b.event_time_ms, length)
    return ProposalBatch(
        b.request_id,
        b.user_id,
        b.event_time_ms,
        b.candidates,
        tuple(b.item_ids[k] for k in kept),
        tuple(b.strategies[k] for k in kept),
        tuple(scores),
        tuple(hist.items.tolist()),
        tuple(hist.labels.tolist()),
        tuple(hist.times_ms.tolist()),
    )


def rounds(users: Sequence[int]) -> list[int]:
    """Round number per position: the n-th request of a user in the batch goes to round n."""
    seen: dict[int, int] = {}
    out = []
    for u in users:
        out.append(seen.get(u, 0))
        seen[u] = out[-1] + 1
    return out


def older_than_verified(b: ProposalBatch, ledger: LedgerState) -> bool:
    """Whether ``b`` is older than the user's newest verified request (the newest ledger mark:
    each verified request marks its pairs at its own event time).

    Both drivers see a user's requests in event-time order (the simulator sorts them; a user's
    requests share a partition, produced in time order), so a new request is never older. One
    that is was verified already, with its id since pushed out of the list by newer ones (a
    user with 18 requests in the first seconds of a 40x replay, redelivered after a rebalance:
    the two oldest were verified again and picked pairs an uninterrupted run never embeds), or
    arrived too late for its pairs to serve anything the newer request's do not.
    """
    return bool(ledger.pairs) and b.event_time_ms < max(ledger.pairs.values())


def verify_requests(
    batches: Sequence[ProposalBatch],
    ledgers: Callable[[int], LedgerState],
    histories: Callable[[int], list[Entry]],
    verifier: Verifier | None,
    knobs: VerifyKnobs,
    confirmed: Callable[[int], Confirmed],
) -> list[VerifyResult]:
    """Verify ``batches`` (event order) with one VM call per round; one result per batch.

    ``ledgers``/``histories`` return a user's saved state; they are not mutated (results carry
    the new ledgers; within the call, later rounds see earlier rounds' updates). ``confirmed``:
    per user, the embeddings that came back (:mod:`streams.engine.ledger`).
    """
    results: list[VerifyResult | None] = [None] * len(batches)
    current: dict[int, LedgerState] = {}
    order = rounds([b.user_id for b in batches])
    for rnd in range(max(order, default=-1) + 1):
        todo = [i for i, r in enumerate(order) if r == rnd]
        groups: dict[int, list[int]] = {}  #: batch index -> positions of its fresh pairs
        inputs: dict[int, RecurrenceInputs | None] = {}
        for i in todo:
            b = batches[i]
            led = current.get(b.user_id) or ledgers(b.user_id).copy()
            current[b.user_id] = led
            if b.request_id in led.requests or older_than_verified(b, led):
                results[i] = VerifyResult(None, None, redelivered=True)
            else:
                keep = fresh_positions(b, led, knobs, confirmed(b.user_id))
                groups[i] = keep
                inputs[i] = recurrence_inputs(b, keep)
        kept = _verify_groups(verifier, batches, groups, inputs)
        for i, selection in kept.items():
            b, led = batches[i], current[batches[i].user_id]
            results[i] = _result(b, groups[i], selection, led, histories, knobs)
    return [r for r in results if r is not None]


def _verify_groups(
    verifier: Verifier | None,
    batches: Sequence[ProposalBatch],
    groups: dict[int, list[int]],
    inputs: dict[int, RecurrenceInputs | None],
) -> dict[int, Picked]:
    """Per batch index, which of its fresh positions the VM kept (one model call, the pairs
    gathered from the messages as arrays); without a VM every fresh pair, scored 0."""
    idx = [i for i, keep in groups.items() if keep]
    kept = {i: Picked([], []) for i in groups if not groups[i]}
    if verifier is None:
        every = {i: Picked(list(range(len(groups[i]))), [0.0] * len(groups[i])) for i in idx}
        return {**kept, **every}
    sizes = [len(groups[i]) for i in idx]
    n = sum(sizes)
    items = np.fromiter((batches[i].item_ids[k] for i in idx for k in groups[i]), np.int64, n)
    users = np.repeat(np.array([batches[i].user_id for i in idx], np.int64), sizes)
    times = np.repeat(np.array([batches[i].event_time_ms for i in idx], np.int64), sizes)
    out = verifier.pick_many(
        users,
        items,
        times,
        sizes,
        [batches[i].candidates for i in idx],
        [inputs[i] for i in idx],
    )
    return {**kept, **dict(zip(idx, out, strict=True))}


def _result(
    b: ProposalBatch,
    fresh: list[int],
    picked: Picked,
    led: LedgerState,
    histories: Callable[[int], list[Entry]],
    knobs: VerifyKnobs,
) -> VerifyResult:
    if not picked.positions:  # nothing sent, nothing to remember
        return VerifyResult(None, None, proposed=len(fresh), dropped_nonfinite=picked.nonfinite)
    kept = [fresh[k] for k in picked.positions]  # positions in ``b``
    record(led.pairs, (b.item_ids[k] for k in kept), b.event_time_ms, knobs.pair_ttl_ms)
    led.requests = [*led.requests, b.request_id][-VERIFIED_REQUESTS_KEPT:]
    out = verified_batch(b, kept, picked.scores, histories(b.user_id), knobs.history_len)
    return VerifyResult(
        out,
        led.copy(),
        proposed=len(fresh),
        verified=len(kept),
        dropped_nonfinite=picked.nonfinite,
    )
