"""Embed step: the FM over a micro-batch of ``verified`` messages, one bad message isolated.

Each message is checked before the FM sees it (sorted history times, labels in {0, 1}, one
strategy per item); the batch then goes through the FM in one call. If that call fails, the
batch is split and each message embedded alone, so only the message that fails is reported (and
dead-lettered by the caller) while every other message of the batch is embedded: before, one
poison message lost its whole batch (Faust acked the in-flight events when the agent crashed).

The FM's output is checked too, right after the call and before anything is stored: a message
whose vectors are not finite in the stored dtype (NaN, or a value that overflows float16) fails
alone. Its ``embeddings`` message could not be encoded, and before this check the agent crashed
in its send phase after the message's pairs were already in the store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from models.errors import InferenceError, InputError
from schemas.records import EmbeddingBatch, PairEmbedding, PairProposal, ProposalBatch
from schemas.vectors import VectorDtype
from streams.engine.errors import StepError
from streams.engine.history import UserHistory

E = TypeVar("E")  #: the caller's handle of a message (a Faust event)


@dataclass(frozen=True, slots=True)
class EmbedInput(Generic[E]):
    """One verified message ready for the FM: its pairs are ``batch.item_ids``, all embedded
    with ``history`` as of ``batch.event_time_ms`` (no per-pair objects on the hot path)."""

    event: E
    batch: ProposalBatch
    history: UserHistory

    @property
    def n_pairs(self) -> int:
        return len(self.batch.item_ids)

    @property
    def pairs(self) -> list[PairProposal]:
        """The message's pairs as records (for callers embedding one message at a time)."""
        b = self.batch
        return [
            PairProposal(b.request_id, b.user_id, item, b.event_time_ms, strategy)
            for item, strategy in zip(b.item_ids, b.strategies, strict=True)
        ]

    @property
    def histories(self) -> list[UserHistory]:
        return [self.history] * self.n_pairs


#: embeds the pairs of the given messages: their records, message after message
EmbedFn = Callable[[list[EmbedInput[Any]]], Awaitable[list[PairEmbedding]]]


def embed_input(event: E, b: ProposalBatch) -> EmbedInput[E]:
    """Validate ``b`` and build its FM inputs; raises :class:`StepError` naming what is
    wrong."""
    if len(b.item_ids) != len(b.strategies):
        raise StepError(f"{len(b.item_ids)} items but {len(b.strategies)} strategies")
    if not set(b.history_labels) <= {0, 1}:
        raise StepError(f"history labels must be 0 or 1, got {sorted(set(b.history_labels))}")
    try:
        hist = UserHistory.of(b.history_items, b.history_labels, b.history_times_ms)
    except InputError as exc:  # e.g. times not oldest first
        raise StepError(f"bad history: {exc}") from exc
    return EmbedInput(event, b, hist)


@dataclass
class EmbedOutcome(Generic[E]):
    """Per message: its embeddings, or the error that made it fail."""

    done: list[tuple[EmbedInput[E], list[PairEmbedding]]]
    failed: list[tuple[EmbedInput[E], Exception]]
    fm_calls: int = 0


class ModelUnavailable(RuntimeError):
    """The FM failed on every message of a group, each alone, with an inference error (not an
    input error): the model (or its GPU) is at fault, not the data. An infrastructure error:
    the batch is run again, never dead-lettered (issue 24, item 2)."""


def model_fault(exc: BaseException) -> bool:
    """An error of the model run itself, as opposed to one about its input."""
    return isinstance(exc, InferenceError) and not isinstance(exc, InputError)


async def embed_isolating(
    items: Sequence[EmbedInput[E]],
    embed: EmbedFn,
    passthrough: tuple[type[BaseException], ...] = (),
) -> EmbedOutcome[E]:
    """Embed ``items`` in one FM call; on failure, one call per message to isolate the bad
    ones. Exceptions of the ``passthrough`` types (infrastructure, not data) propagate. A
    message whose input alone makes the model fail while others succeed is reported as failed
    (dead-lettered by the caller).

    When no message could be embedded and each failed on the model itself, the model runs on
    a probe (:func:`probe_input`: no history, one unknown item), which a working model always
    embeds: if the probe fails too, the model is down (:class:`ModelUnavailable`: the batch is
    rerun, a transient GPU or runtime failure must not dead-letter good data); if it succeeds,
    the messages are at fault and are reported as failed. Without the probe, one poison
    message alone in its group (common in quiet traffic) read as an outage and crash-looped
    the worker."""
    out = await _isolating(items, embed, passthrough)
    if out.failed and not out.done and all(model_fault(exc) for _, exc in out.failed):
        first = out.failed[0][1]
        probe = probe_input(out.failed[0][0].batch.event_time_ms)
        try:
            out.fm_calls += 1
            await embed([probe])
        except passthrough:
            raise
        except Exception as down:
            raise ModelUnavailable(
                f"the FM failed on all {len(out.failed)} messages of a group, each alone, and "
                f"on a probe: {first} (probe: {down})"
            ) from first
    return out


#: the probe's request id (never a real request's: it is not sent anywhere)
PROBE_REQUEST = "solaris-model-probe"


def probe_input(event_time_ms: int) -> EmbedInput[None]:
    """A message any working FM embeds: a user with no history, one item (an unknown id maps
    to the vocabulary's unknown slot), at a valid event time."""
    batch = ProposalBatch(PROBE_REQUEST, 0, event_time_ms, 1, (0,), ("probe",))
    return EmbedInput(None, batch, UserHistory.of((), (), ()))


async def _isolating(
    items: Sequence[EmbedInput[E]],
    embed: EmbedFn,
    passthrough: tuple[type[BaseException], ...],
) -> EmbedOutcome[E]:
    out: EmbedOutcome[E] = EmbedOutcome([], [])
    todo = [it for it in items if it.n_pairs]
    if not todo:
        return out
    try:
        out.fm_calls += 1
        vectors = await embed(todo)
    except passthrough:
        raise
    except Exception as exc:
        if len(todo) == 1:
            out.failed.append((todo[0], exc))
            return out
        for it in todo:
            one = await _isolating([it], embed, passthrough)
            out.done += one.done
            out.failed += one.failed
            out.fm_calls += one.fm_calls
        return out
    all_finite = _finite(vectors)  # one check for the group; per message only if it fails
    offset = 0
    for it in todo:
        mine = vectors[offset : offset + it.n_pairs]
        offset += it.n_pairs
        bad = None if all_finite else nonfinite_output(it, mine)
        if bad is None:
            out.done.append((it, mine))
        else:
            out.failed.append((it, bad))
    return out


def _finite(vectors: Sequence[PairEmbedding]) -> bool:
    """True if every value of ``vectors`` (records of one dtype) is finite."""
    if not vectors:
        return True
    raw = np.frombuffer(b"".join(e.vector for e in vectors), VectorDtype(vectors[0].dtype).numpy)
    return bool(np.isfinite(raw).all())


def nonfinite_output(item: EmbedInput[Any], mine: Sequence[PairEmbedding]) -> StepError | None:
    """The error for a message whose FM output is not finite (a value that does not fit the
    stored dtype, or NaN), or None if it is finite: the message is dead-lettered alone."""
    if _finite(mine):
        return None
    bad = [e.item_id for e in mine if not _finite([e])]
    dtype = mine[0].dtype
    return StepError(
        f"FM output is not finite (NaN or infinity as {dtype}) for request "
        f"{item.batch.request_id!r}, items {bad[:10]} ({len(bad)} of {len(mine)} pairs, "
        f"model version {mine[0].model_version})"
    )


def past_pair_ttl(event_time_ms: int, now_ms: int, pair_ttl_ms: int) -> bool:
    """True when the pairs of a verified message dated ``event_time_ms`` can no longer be served
    exact to a request at ``now_ms`` or later (the reader serves a pair only while request time
    minus pair time is at most the pair TTL): the FM worker sheds such a message unembedded
    (``SOLARIS_SHED_CLOCK``). The simulator's FM keeps up (a message is embedded at its own
    event time), so it never sheds."""
    return now_ms - event_time_ms > pair_ttl_ms


def chunk_by_pairs(items: Sequence[EmbedInput[E]], max_pairs: int) -> list[list[EmbedInput[E]]]:
    """Consecutive groups of ``items`` with at most ``max_pairs`` pairs each (a message with
    more pairs than that forms a group of its own: a message is never split)."""
    groups: list[list[EmbedInput[E]]] = []
    size = 0
    for it in items:
        if not groups or (size + it.n_pairs > max_pairs and groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(it)
        size += it.n_pairs
    return groups


def embedding_batch(b: ProposalBatch, mine: Sequence[PairEmbedding]) -> EmbeddingBatch:
    """The ``embeddings`` message of one verified request (its pairs' vectors, in order)."""
    first = mine[0]
    return EmbeddingBatch(
        b.request_id,
        b.user_id,
        b.event_time_ms,
        first.model_version,
        first.dtype,
        first.dim,
        tuple(e.item_id for e in mine),
        b"".join(e.vector for e in mine),
    )
