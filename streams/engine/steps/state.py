"""State step (issue 22's state tier): each embedded request leaves its user's FM state.

The FM worker already holds, per verified message, the user's history as of the request. The
FM's first half (``fm_state.onnx``) turns it into one state vector per user; the ranker's reader
decodes that state for any candidate with the FM's own head (``fm_decode.onnx``), so a
candidate without an exact pair still gets an item-specific vector, where the aggregate tier
gives every candidate the same one. Offline (``models.fallback_designs``, design B) this beat
both the aggregate and the similar-items design on every MovieLens dataset.

The states of each user's two newest messages per call, written oldest first: the store keeps
each user's two newest states across calls (:mod:`store.state_slots`, so a lookup racing the
write of its own request's state still has the previous one), and writing every message that
could be one of them makes what is stored independent of how messages were grouped into
calls (the live FM worker's micro-batches differ from the simulator's). Both drivers call
:func:`user_states`; only the model call differs (the live agent runs it in the model thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from schemas.vectors import VectorDtype
from store.state_slots import SLOTS
from store.values import encode_state
from streams.engine.history import UserHistory
from streams.engine.steps.embed import EmbedInput


class StateModel(Protocol):
    """The FM split in two (``models.runtime.StateRunner``). Blocking, batched."""

    @property
    def width(self) -> int: ...

    def states(self, event_time_ms: np.ndarray, histories: Sequence[UserHistory]) -> np.ndarray:
        """float32 ``[B, width]``: each row's user state as of its event time."""
        ...

    def decode(self, item_ids: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(embeddings float32 [B, dim], logits float32 [B])`` from ``states`` [B, width]."""
        ...


@dataclass(frozen=True, slots=True)
class StateRows:
    """The rows one state call computes: each user's newest messages (up to
    :data:`~store.state_slots.SLOTS`), a user's older first."""

    users: list[int]
    times: np.ndarray  #: int64 [B]: each user's newest request time
    histories: list[UserHistory]
    #: int64 [B]: each row's position among the messages it was chosen from
    index: np.ndarray


@dataclass(frozen=True, slots=True)
class StateValues:
    """What to write (``(user, encoded state)`` in write order) and how many were refused as
    non-finite."""

    values: list[tuple[int, bytes]]
    nonfinite: int


def state_rows(items: Sequence[EmbedInput[Any]]) -> StateRows:
    """Each user's newest messages among ``items`` (up to ``SLOTS``; on equal times the later
    in ``items`` counts as newer), a user's older first."""
    by_user: dict[int, list[tuple[int, EmbedInput[Any]]]] = {}
    for k, it in enumerate(items):
        by_user.setdefault(it.batch.user_id, []).append((k, it))
    rows = [
        row
        for its in by_user.values()
        for row in sorted(its, key=lambda x: x[1].batch.event_time_ms)[-SLOTS:]  # stable on ties
    ]
    return StateRows(
        [it.batch.user_id for _, it in rows],
        np.array([it.batch.event_time_ms for _, it in rows], np.int64),
        [it.history for _, it in rows],
        np.array([k for k, _ in rows], np.int64),
    )


def encode_states(
    rows: StateRows, states: np.ndarray, model_version: str, dtype: VectorDtype
) -> StateValues:
    """Encoded values of ``states`` (one row per user of ``rows``); a state that is not finite
    in the stored dtype is left out and counted (the reader would refuse it as corrupt)."""
    with np.errstate(over="ignore"):  # an overflow is what this looks for
        stored = np.asarray(states, np.float32).astype(dtype.numpy)
    finite = np.isfinite(stored).all(axis=1)
    values = [
        (user, encode_state(int(t), model_version, states[i], dtype))
        for i, (user, t) in enumerate(zip(rows.users, rows.times.tolist(), strict=True))
        if finite[i]
    ]
    return StateValues(values, int((~finite).sum()))


def user_states(
    items: Sequence[EmbedInput[Any]],
    run: Callable[[np.ndarray, list[UserHistory]], np.ndarray],
    model_version: str,
    dtype: VectorDtype,
) -> StateValues:
    """The states to store for the embedded messages ``items``; ``run`` is the state model's
    ``states`` (called once, only when there is a message)."""
    rows = state_rows(items)
    if not rows.users:
        return StateValues([], 0)
    return encode_states(rows, run(rows.times, rows.histories), model_version, dtype)


def computed_states(
    items: Sequence[EmbedInput[Any]],
    states: np.ndarray,
    model_version: str,
    dtype: VectorDtype,
) -> StateValues:
    """:func:`user_states` from the states the FM run already computed, ``states[k]`` being
    ``items[k]``'s (``PreparedPairs.states``, filled by
    :meth:`~streams.engine.embedder.Embedder.run`): the same rows and values without a second
    pass of the history encoder."""
    if len(states) != len(items):
        raise ValueError(f"{len(states)} states for {len(items)} messages")
    rows = state_rows(items)
    if not rows.users:
        return StateValues([], 0)
    return encode_states(rows, states[rows.index], model_version, dtype)
