"""Embedding: run the FM on verified pairs (one micro-batch per call) and build PairEmbeddings.

Each pair is embedded with the user's history *as of its request's event time* (the caller
passes ``history_before(..., pair.event_time_ms)``), so a late batch computes exactly what the
FM would have computed at speculation time. Output vectors are float16 (half the bytes; the
loss, ~1e-3 relative, is far below what the VM can use).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from schemas.records import PairEmbedding, PairProposal, ProposalBatch
from schemas.vectors import VectorDtype
from streams.engine.history import UserHistory


class EmbeddingModel(Protocol):
    """The FM (ONNX). Blocking, deterministic for equal inputs, batched."""

    model_version: str
    dim: int

    def embed(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(embeddings float32 [B, dim], logits float32 [B])``."""
        ...


@dataclass(slots=True)
class EmbedderStats:
    pairs: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds if self.seconds else 0.0


@runtime_checkable
class PreparingModel(EmbeddingModel, Protocol):
    """An FM whose ``embed`` splits into a Python half and a model half (:class:`FMRunner`):
    the caller can build the next batch's inputs while the model runs this one."""

    def prepare(
        self,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
        n: int | None = None,
    ) -> dict[str, np.ndarray]: ...

    def run_prepared(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]: ...


class SplitModel(Protocol):
    """The FM split in two (``models.runtime.StateRunner``): one history encoding per message
    (``states``), then the FM's head per pair (``decode``) — equal to the whole FM per pair."""

    def states(self, event_time_ms: np.ndarray, histories: Sequence[UserHistory]) -> np.ndarray: ...

    def decode(self, item_ids: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(frozen=True, slots=True)
class MessageInputs:
    """Verified messages for the split FM: each message's time and history, and per pair the
    index of its message."""

    times: np.ndarray  #: int64 [M]
    histories: Sequence[UserHistory]
    message_of_pair: np.ndarray  #: int64 [P]


@dataclass(slots=True)
class PreparedPairs:
    """Pairs ready for the model: their keys and, for a :class:`PreparingModel`, its input
    tensors (else the per-pair histories that ``embed`` takes); for the split FM, their
    messages."""

    users: np.ndarray
    items: np.ndarray
    times: np.ndarray
    inputs: dict[str, np.ndarray] | None
    histories: Sequence[UserHistory] = ()
    messages: MessageInputs | None = None
    #: float32 ``[M, width]``: each message's state, once the split FM ran (:meth:`Embedder.run`)
    states: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.users.shape[0])


class Embedder:
    """Turns verified pairs into :class:`PairEmbedding` records.

    :meth:`embed` and :meth:`embed_messages` do it in one call. A caller that overlaps batches
    (the ``embed`` agent) calls the three steps instead: :meth:`prepare_messages` and
    :meth:`records` on its own thread, :meth:`run` (the model, no GIL in onnxruntime) on a
    model thread, so input building and record making of neighbouring batches overlap the FM.
    """

    def __init__(
        self,
        model: EmbeddingModel,
        dtype: VectorDtype = VectorDtype.FLOAT16,
        split: SplitModel | None = None,
    ) -> None:
        """``split``: embed verified messages with the split FM (one history encoding per
        message instead of one per pair; the same outputs up to float rounding)."""
        self.model = model
        self.dtype = dtype
        self.split_model = split
        self.stats = EmbedderStats()
        #: the model again where it can prepare (checked once: a Protocol ``isinstance``
        #: inspects every member)
        self._split = model if isinstance(model, PreparingModel) else None

    def embed(
        self, pairs: Sequence[PairProposal], histories: Sequence[UserHistory]
    ) -> list[PairEmbedding]:
        return self._complete(self.prepare(pairs, histories))

    def prepare(
        self, pairs: Sequence[PairProposal], histories: Sequence[UserHistory]
    ) -> PreparedPairs:
        """Keys and model inputs of ``pairs`` (one history each): :meth:`embed`'s first step."""
        if len(pairs) != len(histories):
            raise ValueError(f"{len(pairs)} pairs but {len(histories)} histories")
        keys = np.array([(p.user_id, p.item_id, p.event_time_ms) for p in pairs], np.int64)
        keys = keys.reshape(len(pairs), 3)
        return self._prepare(keys[:, 0], keys[:, 1], keys[:, 2], histories)

    def embed_messages(
        self, batches: Sequence[ProposalBatch], histories: Sequence[UserHistory]
    ) -> list[PairEmbedding]:
        """The pairs of verified messages (``item_ids`` of each, embedded with that message's
        history): equal to :meth:`embed` over their pairs, without a record per pair going in."""
        return self._complete(self.prepare_messages(batches, histories))

    def embed_messages_with_states(
        self, batches: Sequence[ProposalBatch], histories: Sequence[UserHistory]
    ) -> tuple[list[PairEmbedding], np.ndarray | None]:
        """:meth:`embed_messages` and each message's state (None: not the split FM)."""
        prepared = self.prepare_messages(batches, histories)
        if not len(prepared):
            return [], None
        vectors = self.run(prepared)
        return self.records(prepared, vectors), prepared.states

    def prepare_messages(
        self, batches: Sequence[ProposalBatch], histories: Sequence[UserHistory]
    ) -> PreparedPairs:
        """Keys and model inputs of the messages' pairs (the Python half of the FM call)."""
        if len(batches) != len(histories):
            raise ValueError(f"{len(batches)} messages but {len(histories)} histories")
        counts = [len(b.item_ids) for b in batches]
        n = sum(counts)
        items = np.fromiter(itertools.chain.from_iterable(b.item_ids for b in batches), np.int64, n)
        users = np.repeat(np.array([b.user_id for b in batches], np.int64), counts)
        msg_times = np.array([b.event_time_ms for b in batches], np.int64)
        times = np.repeat(msg_times, counts)
        if self.split_model is not None:
            of_pair = np.repeat(np.arange(len(batches), dtype=np.int64), counts)
            messages = MessageInputs(msg_times, list(histories), of_pair)
            return PreparedPairs(users, items, times, None, (), messages)
        per_pair = [h for h, k in zip(histories, counts, strict=True) for _ in range(k)]
        return self._prepare(users, items, times, per_pair)

    def _complete(self, prepared: PreparedPairs) -> list[PairEmbedding]:
        """The model and the records of prepared pairs, in one call (no model call for none)."""
        return self.records(prepared, self.run(prepared)) if len(prepared) else []

    def _prepare(
        self,
        users: np.ndarray,
        items: np.ndarray,
        times: np.ndarray,
        histories: Sequence[UserHistory],
    ) -> PreparedPairs:
        start = time.perf_counter()
        if self._split is not None:
            inputs = self._split.prepare(items, times, histories, len(users))
            out = PreparedPairs(users, items, times, inputs)
        else:
            out = PreparedPairs(users, items, times, None, histories)
        self.stats.seconds += time.perf_counter() - start
        return out

    def run(self, prepared: PreparedPairs) -> np.ndarray:
        """The FM on prepared pairs: embeddings float32 ``[B, dim]`` (thread-safe to call from
        one model thread while another thread prepares or makes records). With the split FM it
        also leaves each message's state in ``prepared.states``: the state tier stores those,
        so the history encoder runs once per message, not again for the states."""
        start = time.perf_counter()
        m = prepared.messages
        if m is not None and self.split_model is not None:
            states = self.split_model.states(m.times, m.histories)
            prepared.states = states
            vectors, _ = self.split_model.decode(prepared.items, states[m.message_of_pair])
        elif prepared.inputs is not None and self._split is not None:
            vectors, _ = self._split.run_prepared(prepared.inputs)
        else:
            p = prepared
            vectors, _ = self.model.embed(p.users, p.items, p.times, p.histories)
        self.stats.seconds += time.perf_counter() - start
        return vectors

    def records(self, prepared: PreparedPairs, vectors: np.ndarray) -> list[PairEmbedding]:
        """One record per pair (the vectors converted in one call and sliced as bytes, cheaper
        than a numpy row and ``tobytes`` per pair)."""
        n = len(prepared)
        if vectors.shape[0] != n:
            raise ValueError(f"the model returned {vectors.shape[0]} vectors for {n} pairs")
        self.stats.pairs += n
        self.stats.batches += 1
        with np.errstate(over="ignore"):  # an overflow is refused by the embed step's check
            raw = np.ascontiguousarray(vectors, dtype=self.dtype.numpy)
        version, dim, dtype = self.model.model_version, int(raw.shape[1]), self.dtype.value
        buf, width = raw.tobytes(), raw.shape[1] * raw.itemsize
        keys = zip(
            prepared.users.tolist(), prepared.items.tolist(), prepared.times.tolist(), strict=True
        )
        return [
            PairEmbedding(u, i, t, version, dtype, dim, buf[o : o + width])
            for (u, i, t), o in zip(keys, range(0, len(buf), width), strict=True)
        ]
