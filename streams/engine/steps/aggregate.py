"""Aggregate step: a batch of embedded messages → each user's rolling 24 h mean (the aggregate
tier), one definition for both drivers.

The live aggregate agent calls :func:`aggregate_step` on a batch of ``embeddings`` messages and
the simulator on each embedded request; the rules (own-FM dim check, version restarts, late
embeddings of a retired version dropped, redeliveries not counted twice, event-time window) are
:class:`~streams.engine.aggregator.RollingAggregator`'s. A message the step cannot process is
refused alone (:class:`~streams.engine.errors.StepError`, returned with its index: the agent
dead-letters it, the simulator counts it) and leaves its user's state as it was. The live agent
also isolates any other error of one message's fold (``isolate``: one poison message costs only
itself); the simulator does not (a bug there should stop the run).

State in, state out: ``load(user)`` gives a user's state (the agent reads its table, the
simulator its dict); the result holds every state the batch touched, which the caller saves
*after* the aggregates are stored (a crash in between re-adds the same pairs: idempotent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schemas.records import EmbeddingBatch, PairEmbedding, UserAggregate
from streams.engine.aggregator import AggregateState, RollingAggregator
from streams.engine.errors import StepError


@dataclass(slots=True)
class AggregateResult:
    """What one batch changed."""

    #: every user's state a message was folded into (save these), in first-folded order
    states: dict[int, AggregateState] = field(default_factory=dict)
    #: each user's newest aggregate from the batch (store these)
    aggregates: dict[int, UserAggregate] = field(default_factory=dict)
    #: ``(index in the batch, why)`` of each message not folded in
    refused: list[tuple[int, Exception]] = field(default_factory=list)
    #: embeddings dropped as late arrivals of a retired model version
    stale_dropped: int = 0


#: one message: the FM worker's (live) or the pair records of one request (the simulator)
Message = EmbeddingBatch | Sequence[PairEmbedding]


def aggregate_step(
    messages: Sequence[Message],
    load: Callable[[int], AggregateState],
    aggregator: RollingAggregator,
    isolate: tuple[type[Exception], ...] = (StepError,),
) -> AggregateResult:
    """Fold each message (the embeddings of one user's request, in batch order) into its user's
    state; ``load`` is called once per user (outside ``isolate``: a table read error is the
    infrastructure's, never the message's)."""
    out = AggregateResult()
    before = aggregator.stale_dropped
    loaded: dict[int, AggregateState] = {}
    for index, message in enumerate(messages):
        if isinstance(message, EmbeddingBatch):
            if not message.item_ids:
                continue
            user = message.user_id
        elif message:
            user = message[0].user_id
        else:
            continue
        state = loaded.get(user)
        if state is None:
            state = loaded[user] = load(user)
        try:
            if not isinstance(message, EmbeddingBatch):  # a message is one user's by design
                check_one_message(message)
            agg = aggregator.add(state, message)
        except isolate as exc:
            out.refused.append((index, exc))
            continue
        out.states.setdefault(user, state)
        if agg is not None:
            out.aggregates[user] = agg
    out.stale_dropped = aggregator.stale_dropped - before
    return out


def check_one_message(embeddings: Sequence[PairEmbedding]) -> None:
    """Refuse, before any state changes, a message whose embeddings are not one user's of one
    model version and one width (the aggregator would otherwise fold part of it and then raise
    on the rest)."""
    first = embeddings[0]
    for emb in embeddings[1:]:
        if (emb.user_id, emb.model_version, emb.dim) != (
            first.user_id,
            first.model_version,
            first.dim,
        ):
            raise StepError(
                f"message mixes embeddings: user {emb.user_id} version {emb.model_version!r} "
                f"dim {emb.dim} after user {first.user_id} version {first.model_version!r} "
                f"dim {first.dim}"
            )
