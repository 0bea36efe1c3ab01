"""Field-level rules checked on every encode and decode (Avro checks only types).

Each rule raises :class:`~schemas.errors.InvalidField` naming the record and field, so a
dead-letter entry says exactly what was wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from schemas.errors import InvalidField
from schemas.limits import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, Limits
from schemas.records import (
    DeadLetter,
    EmbeddingBatch,
    ImpressionEvent,
    NeighbourList,
    PairEmbedding,
    PairProposal,
    ProposalBatch,
    RequestEvent,
    UserAggregate,
)
from schemas.vectors import VectorDtype


def _fail(rec: Any, field: str, msg: str) -> InvalidField:
    return InvalidField(type(rec).__name__, field, msg)


def all_finite(values: Sequence[float]) -> bool:
    """True if no value is NaN or infinite. One ``sum`` in C decides in the common case: a
    NaN or an infinity makes the sum non-finite; only then (or when finite values overflow
    the sum) are the values checked one by one. Every message is validated on encode and
    decode, and the per-value check was most of a speculated message's validation."""
    return math.isfinite(sum(values)) or all(math.isfinite(v) for v in values)


def all_non_negative(values: Sequence[float]) -> bool:
    """True if every value is >= 0 (``min`` in C; a NaN is not caught here, see
    :func:`all_finite`)."""
    return not values or min(values) >= 0


def _check_id(rec: Any, field: str) -> None:
    value = getattr(rec, field)
    if value < 0:
        raise _fail(rec, field, f"must be >= 0, got {value}")


def _check_time(rec: Any, field: str = "event_time_ms") -> None:
    value = getattr(rec, field)
    if not MIN_EVENT_TIME_MS <= value < MAX_EVENT_TIME_MS:
        raise _fail(rec, field, f"{value} is outside [{MIN_EVENT_TIME_MS}, {MAX_EVENT_TIME_MS})")


def _check_str(rec: Any, field: str, limits: Limits, allow_empty: bool = False) -> None:
    value = getattr(rec, field)
    if not value and not allow_empty:
        raise _fail(rec, field, "must not be empty")
    if len(value) > limits.max_string_len:
        raise _fail(rec, field, f"length {len(value)} exceeds {limits.max_string_len}")


def _check_vector(rec: Any, limits: Limits, field: str = "vector", rows: int = 1) -> None:
    """``rec.<field>`` holds ``rows`` x ``rec.dim`` finite values of ``rec.dtype``."""
    if not 0 < rec.dim <= limits.max_dim:
        raise _fail(rec, "dim", f"{rec.dim} is outside (0, {limits.max_dim}]")
    try:
        dtype = VectorDtype(rec.dtype)
    except ValueError:
        raise _fail(rec, "dtype", f"unknown dtype {rec.dtype!r}") from None
    data = getattr(rec, field)
    expected = rows * rec.dim * dtype.numpy.itemsize
    if len(data) != expected:
        raise _fail(rec, field, f"{len(data)} bytes, expected {expected} for dim {rec.dim}")
    if not np.isfinite(np.frombuffer(data, dtype=dtype.numpy)).all():
        raise _fail(rec, field, "contains NaN or infinity")


def _request(rec: RequestEvent, limits: Limits) -> None:
    _check_str(rec, "request_id", limits)
    _check_id(rec, "user_id")
    _check_time(rec)
    _check_str(rec, "surface", limits)
    if len(rec.candidates) > limits.max_candidates:
        raise _fail(rec, "candidates", f"{len(rec.candidates)} exceeds {limits.max_candidates}")
    if not all_non_negative(rec.candidates):
        raise _fail(rec, "candidates", "item ids must be >= 0")


def _impression(rec: ImpressionEvent, limits: Limits) -> None:
    _check_str(rec, "request_id", limits)
    _check_id(rec, "user_id")
    _check_id(rec, "item_id")
    _check_time(rec)
    if rec.position < 0:
        raise _fail(rec, "position", f"must be >= 0, got {rec.position}")
    if rec.label not in (0, 1):
        raise _fail(rec, "label", f"must be 0 or 1, got {rec.label}")


def _proposal(rec: PairProposal, limits: Limits) -> None:
    _check_str(rec, "request_id", limits)
    _check_id(rec, "user_id")
    _check_id(rec, "item_id")
    _check_time(rec)
    _check_str(rec, "strategy", limits)
    if rec.score is not None and not math.isfinite(rec.score):
        raise _fail(rec, "score", "must be finite")


def _pair(rec: PairEmbedding, limits: Limits) -> None:
    _check_id(rec, "user_id")
    _check_id(rec, "item_id")
    _check_time(rec)
    _check_str(rec, "model_version", limits)
    _check_vector(rec, limits)


def _aggregate(rec: UserAggregate, limits: Limits) -> None:
    _check_id(rec, "user_id")
    _check_time(rec)
    _check_str(rec, "model_version", limits)
    if rec.window_ms <= 0:
        raise _fail(rec, "window_ms", "must be > 0")
    if rec.count <= 0:
        raise _fail(rec, "count", "must be > 0")
    _check_vector(rec, limits)


def _neighbours(rec: NeighbourList, limits: Limits) -> None:
    _check_id(rec, "user_id")
    _check_time(rec)
    if len(rec.neighbours) != len(rec.weights):
        raise _fail(rec, "weights", f"{len(rec.weights)} weights for {len(rec.neighbours)} ids")
    if len(rec.neighbours) > limits.max_neighbours:
        raise _fail(rec, "neighbours", f"{len(rec.neighbours)} exceeds {limits.max_neighbours}")
    if not all_finite(rec.weights):
        raise _fail(rec, "weights", "must be finite")


def _proposal_batch(rec: ProposalBatch, limits: Limits) -> None:
    _check_str(rec, "request_id", limits)
    _check_id(rec, "user_id")
    _check_time(rec)
    n = len(rec.item_ids)
    if not 0 <= rec.candidates <= limits.max_candidates:
        raise _fail(rec, "candidates", f"{rec.candidates} is outside [0, {limits.max_candidates}]")
    if n > limits.max_candidates + limits.max_lookahead:
        raise _fail(
            rec, "item_ids", f"{n} items exceed {limits.max_candidates + limits.max_lookahead}"
        )
    if not all_non_negative(rec.item_ids):
        raise _fail(rec, "item_ids", "item ids must be >= 0")
    if len(rec.strategies) != n:
        raise _fail(rec, "strategies", f"{len(rec.strategies)} strategies for {n} items")
    if rec.scores and len(rec.scores) != n:
        raise _fail(rec, "scores", f"{len(rec.scores)} scores for {n} items")
    for name in ("prior_counts", "pair_counts"):
        values = getattr(rec, name)
        if values and len(values) != n:
            raise _fail(rec, name, f"{len(values)} values for {n} items")
        if not (all_finite(values) and all_non_negative(values)):
            raise _fail(rec, name, "must be finite and >= 0")
    if not all_finite(rec.scores):
        raise _fail(rec, "scores", "must be finite (NaN or infinity found)")
    h = len(rec.history_items)
    if len(rec.history_labels) != h or len(rec.history_times_ms) != h:
        raise _fail(rec, "history_labels", "history arrays differ in length")
    if h > limits.max_history:
        raise _fail(rec, "history_items", f"{h} entries exceed {limits.max_history}")
    if h and max(rec.history_times_ms) >= rec.event_time_ms:
        raise _fail(rec, "history_times_ms", "history must be strictly before the event time")


def _embedding_batch(rec: EmbeddingBatch, limits: Limits) -> None:
    _check_str(rec, "request_id", limits)
    _check_id(rec, "user_id")
    _check_time(rec)
    _check_str(rec, "model_version", limits)
    _check_vector(rec, limits, "vectors", len(rec.item_ids))


def _dead_letter(rec: DeadLetter, limits: Limits) -> None:
    del limits  # dead letters carry arbitrary text; they must never be rejected


VALIDATORS: dict[type, Callable[[Any, Limits], None]] = {
    RequestEvent: _request,
    ImpressionEvent: _impression,
    PairProposal: _proposal,
    PairEmbedding: _pair,
    UserAggregate: _aggregate,
    NeighbourList: _neighbours,
    DeadLetter: _dead_letter,
    ProposalBatch: _proposal_batch,
    EmbeddingBatch: _embedding_batch,
}


def validate(record: Any, limits: Limits) -> None:
    """Raise :class:`InvalidField` if ``record`` breaks a rule; return None otherwise."""
    # By class hierarchy: a newer schema version's record class extends the older one and keeps
    # its rules (schema evolution adds defaulted fields).
    for cls in type(record).__mro__:
        rule = VALIDATORS.get(cls)
        if rule is not None:
            rule(record, limits)
            return
    raise KeyError(f"no validation rules for {type(record).__name__}")
