"""Serving-side model runners: numpy in, numpy out, onnxruntime underneath. No torch.

Used by the streaming engine: ``FMRunner`` computes interaction embeddings (the ``embed``
agent), ``VMRunner`` scores speculated pairs (the ``verify`` agent), ``SolarisRunner`` is the
ranker's VM reading FM embeddings with their tier. Feature code is shared with training
(``models.features``), so a served model sees exactly the inputs it was trained on.

Tier codes (the one-hot input of ``vm_solaris``) are plain ints here so this module depends on
nothing of the store; ``store.tiers.Tier`` uses the same numbering:
``TIER_EXACT = 0``, ``TIER_AGGREGATE = 1``, ``TIER_NEIGHBOUR_ITEM = 2``,
``TIER_NEIGHBOUR_AGGREGATE = 3``, ``TIER_STATE = 4``, ``TIER_MISSING = 5``.

Runners are thread-compatible, not thread-safe: give each worker thread its own (onnxruntime
sessions themselves may be shared, but the runners keep no state besides them anyway). Calls block
the calling thread for the duration of one ``InferenceSession.run``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from models.errors import InferenceError, InputError
from models.features import HistoryArrays, Vocab, fm_history_inputs, vm_inputs
from models.features import cut_histories as cut_histories  # re-exported: serving's FM inputs
from models.features import fm_batch_inputs as fm_batch_inputs
from models.history import UserHistory as UserHistory  # re-exported: the serving API
from models.providers import (
    binding_device,
    inactive_providers,
    resolve_providers,
)
from models.user_features import user_stream_inputs

log = logging.getLogger(__name__)

TIER_EXACT = 0
TIER_AGGREGATE = 1
TIER_NEIGHBOUR_ITEM = 2
TIER_NEIGHBOUR_AGGREGATE = 3
#: the user's stored FM state decoded for the item (issue 22's state tier; served after exact)
TIER_STATE = 4
TIER_MISSING = 5
N_TIERS = 6
#: a scorer-only code, not a served tier: the store could not be read (timeout, outage), so
#: nothing is known about this row. A ``vm_solaris`` built with a baseline VM
#: (``baseline_on_unavailable`` in its metadata) scores such rows exactly as that VM; to
#: others it is the missing tier. Kept apart from ``TIER_MISSING`` because "nothing stored for
#: this user" is itself informative (a new user), "the store did not answer" is not.
TIER_UNAVAILABLE = N_TIERS
TIER_NAMES: tuple[str, ...] = (
    "exact",
    "aggregate",
    "neighbour_item",
    "neighbour_aggregate",
    "state",
    "missing",
)


class OnnxSession:
    """An ``InferenceSession`` with our defaults: CUDA when available, fixed threads, warmed up.

    ``run`` takes and returns numpy arrays by name; onnxruntime errors become
    :class:`InferenceError`. ``provider`` is the execution provider actually used first;
    ``device`` is where inputs/outputs are bound (see :func:`binding_device`), ``None`` = not.
    """

    def __init__(
        self,
        path: Path | str,
        threads: int = 1,
        providers: Sequence[str] | None = None,
        warmup: bool = True,
        io_binding: bool | None = None,
    ) -> None:
        self.path = Path(path)
        usable = resolve_providers(providers)
        opts = ort.SessionOptions()
        if threads > 0:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(self.path), opts, providers=usable)
        except Exception as exc:  # ORT raises its own exception family plus RuntimeError
            raise InferenceError(f"cannot load {self.path}: {exc}") from exc
        inactive = inactive_providers(usable, self._session.get_providers())
        if inactive and providers:  # an explicit request is a requirement
            raise InferenceError(
                f"{self.path.name}: onnxruntime could not start {inactive} (libraries missing or "
                f"no device?); the session has {self._session.get_providers()}"
            )
        if inactive:
            log.warning("%s: %s unavailable, running on CPU", self.path.name, inactive)
        self.provider: str = self._session.get_providers()[0]
        self.device = binding_device(self.provider, io_binding)
        options = self._session.get_provider_options().get(self.provider, {})
        self.device_id = int(options.get("device_id", 0))
        self.input_names = tuple(i.name for i in self._session.get_inputs())
        self.output_names = tuple(o.name for o in self._session.get_outputs())
        self.metadata: dict[str, str] = dict(self._session.get_modelmeta().custom_metadata_map)
        if warmup:
            self.run(self._dummy_inputs())
        log.info("loaded %s on %s (io binding: %s)", self.path.name, self.provider, self.device)

    def _dummy_inputs(self) -> dict[str, np.ndarray]:
        out = {}
        for node in self._session.get_inputs():
            shape = [d if isinstance(d, int) else 2 for d in node.shape]
            dtype = np.int64 if "int64" in node.type else np.float32
            out[node.name] = np.ones(shape, dtype=dtype)
        return out

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One blocking inference call; outputs are host numpy arrays either way."""
        try:
            if self.device is None:
                outputs = self._session.run(None, dict(inputs))
            else:
                outputs = self._run_bound(inputs, self.device)
        except Exception as exc:
            raise InferenceError(f"{self.path.name}: inference failed: {exc}") from exc
        return dict(zip(self.output_names, outputs, strict=True))

    def _run_bound(self, inputs: Mapping[str, np.ndarray], device: str) -> list[np.ndarray]:
        """Inputs copied to ``device`` once, outputs allocated there and copied back once.

        A fresh binding per call: batch shapes vary, and a binding holds its device buffers
        (the ``OrtValue`` list keeps the inputs alive until the run has finished).
        """
        binding = self._session.io_binding()
        values = [
            (
                name,
                ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr), device, self.device_id),
            )
            for name, arr in inputs.items()
        ]
        for name, value in values:
            binding.bind_ortvalue_input(name, value)
        for name in self.output_names:
            binding.bind_output(name, device, self.device_id)
        self._session.run_with_iobinding(binding)
        return list(binding.copy_outputs_to_cpu())


def _ids(name: str, values: Any, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise InputError(f"{name} must be 1-D of length {n}, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"{name} must be integers, got {arr.dtype}")
    return arr.astype(np.int64, copy=False)


class FMRunner:
    """The FM: ``embed`` → (interaction embeddings float32 [B, d], logits float32 [B])."""

    def __init__(
        self,
        session: OnnxSession,
        item_vocab: Vocab,
        history_len: int,
        model_version: str,
        dim: int,
    ) -> None:
        self.session = session
        self.item_vocab = item_vocab
        self.history_len = history_len
        self.model_version = model_version
        self.dim = dim

    def embed(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
    ) -> tuple[np.ndarray, np.ndarray]:
        """Embed B pairs as of ``event_time_ms`` (histories are cut strictly before it).

        ``user_ids`` only fixes B here (the FM reads the user through the history).
        """
        b = _ids("user_ids", user_ids).shape[0]
        return self.run_prepared(self.prepare(item_ids, event_time_ms, histories, b))

    def prepare(
        self,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[UserHistory],
        n: int | None = None,
    ) -> dict[str, np.ndarray]:
        """The model's input tensors for these pairs (validation, history cuts, vocabulary):
        the Python half of :meth:`embed`, which a caller can run while the model computes
        another batch (:meth:`run_prepared` holds no GIL while onnxruntime runs)."""
        items = _ids("item_ids", item_ids, n)
        b = items.shape[0]
        times = _ids("event_time_ms", event_time_ms, b)
        if len(histories) != b:
            raise InputError(f"got {len(histories)} histories for {b} pairs")
        if b == 0:
            return {}
        return fm_batch_inputs(self.item_vocab, items, times, histories, self.history_len)

    def run_prepared(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(embeddings float32 [B, d], logits float32 [B])`` of :meth:`prepare`'s tensors."""
        if not inputs:
            return np.zeros((0, self.dim), np.float32), np.zeros(0, np.float32)
        out = self.session.run(inputs)
        return out["embedding"].astype(np.float32, copy=False), out["logit"].astype(
            np.float32, copy=False
        )


class StateRunner:
    """The FM split in two (``fm_state.onnx``, ``fm_decode.onnx``): ``states`` computes each
    user's state as of an event time (the history cut strictly before it), ``decode`` gives
    the FM's ``(embeddings [B, d], logits [B])`` of any items from stored states: equal to
    :meth:`FMRunner.embed` with the history the state was computed from."""

    def __init__(
        self,
        state_session: OnnxSession,
        decode_session: OnnxSession,
        item_vocab: Vocab,
        history_len: int,
        dim: int,
    ) -> None:
        self.state_session = state_session
        self.decode_session = decode_session
        self.item_vocab = item_vocab
        self.history_len = history_len
        self.dim = dim
        self.width = int(state_session.metadata.get("state_width", "0"))
        if self.width <= 0:
            raise InputError(f"{state_session.path.name} does not declare its state_width")

    def states(self, event_time_ms: np.ndarray, histories: Sequence[UserHistory]) -> np.ndarray:
        """float32 [B, width]: one state per row, as of its event time."""
        times = _ids("event_time_ms", event_time_ms)
        if len(histories) != times.shape[0]:
            raise InputError(f"got {len(histories)} histories for {times.shape[0]} rows")
        if times.shape[0] == 0:
            return np.zeros((0, self.width), np.float32)
        raw = cut_histories(histories, times, self.history_len)
        out = self.state_session.run(fm_history_inputs(self.item_vocab, times, raw))
        return out["state"].astype(np.float32, copy=False)

    def decode(self, item_ids: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The FM's outputs for ``item_ids`` [B] from ``states`` [B, width]."""
        items = _ids("item_ids", item_ids)
        st = np.asarray(states, np.float32)
        if st.shape != (items.shape[0], self.width):
            raise InputError(f"states must be float32 [{items.shape[0]}, {self.width}]")
        if items.shape[0] == 0:
            return np.zeros((0, self.dim), np.float32), np.zeros(0, np.float32)
        out = self.decode_session.run({"target_item": self.item_vocab.lookup(items), "state": st})
        return out["embedding"].astype(np.float32, copy=False), out["logit"].astype(
            np.float32, copy=False
        )


class VMRunner:
    """A VM without FM inputs (the ``verify`` agent's, or a baseline): ``score`` → float32 [B].

    A *fair* VM (``user_features``: its graph has a ``user_stats`` input) also reads the
    users' streaming features, computed here from their histories with the training code
    (``models.user_features``); ``history_len`` is how much history it was trained on.
    """

    def __init__(
        self, session: OnnxSession, user_vocab: Vocab, item_vocab: Vocab, history_len: int = 0
    ) -> None:
        self.session = session
        self.user_vocab = user_vocab
        self.item_vocab = item_vocab
        self.history_len = history_len
        self.user_features = "user_stats" in session.input_names
        if self.user_features and history_len <= 0:
            raise InputError(f"{session.path.name} reads user features: give its history_len")

    def _base(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[HistoryArrays] | None = None,
    ) -> dict[str, np.ndarray]:
        users = _ids("user_ids", user_ids)
        b = users.shape[0]
        items = _ids("item_ids", item_ids, b)
        times = _ids("event_time_ms", event_time_ms, b)
        inputs = vm_inputs(self.user_vocab, self.item_vocab, users, items, times)
        if not self.user_features:
            return inputs
        if histories is None or len(histories) != b:
            got = "none" if histories is None else len(histories)
            raise InputError(
                f"{self.session.path.name} reads user stream features: pass one history per "
                f"row ({b} rows, got {got})"
            )
        raw = cut_histories(histories, times, self.history_len)
        return {**inputs, **user_stream_inputs(self.item_vocab, items, times, raw)}

    def score(
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        histories: Sequence[HistoryArrays] | None = None,
    ) -> np.ndarray:
        inputs = self._base(user_ids, item_ids, event_time_ms, histories)
        if inputs["user"].shape[0] == 0:
            return np.zeros(0, np.float32)
        return self.session.run(inputs)["prob"].astype(np.float32, copy=False)


class SolarisRunner(VMRunner):
    """``vm_solaris`` (the ranker): VM inputs + FM embedding + tier → probabilities [B].

    Rows whose tier is ``TIER_MISSING`` are scored with a zero embedding whatever was passed.
    """

    def __init__(
        self,
        session: OnnxSession,
        user_vocab: Vocab,
        item_vocab: Vocab,
        dim: int,
        history_len: int = 0,
    ) -> None:
        super().__init__(session, user_vocab, item_vocab, history_len)
        self.dim = dim
        #: the graph scores TIER_UNAVAILABLE rows with its frozen baseline VM (see the code)
        self.baseline_on_unavailable = session.metadata.get("baseline_on_unavailable") == "1"

    def score(  # type: ignore[override]
        self,
        user_ids: np.ndarray,
        item_ids: np.ndarray,
        event_time_ms: np.ndarray,
        embeddings: np.ndarray,
        tiers: np.ndarray,
        histories: Sequence[HistoryArrays] | None = None,
    ) -> np.ndarray:
        inputs = self._base(user_ids, item_ids, event_time_ms, histories)
        b = inputs["user"].shape[0]
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.shape != (b, self.dim):
            raise InputError(f"embeddings must be float32 [{b}, {self.dim}], got {emb.shape}")
        tier = np.asarray(tiers)
        if tier.shape != (b,):
            raise InputError(f"tiers must be [{b}], got {tier.shape}")
        tier = tier.astype(np.int64)
        if b and (tier.min() < 0 or tier.max() > TIER_UNAVAILABLE):
            raise InputError(f"tier codes must be in 0..{TIER_UNAVAILABLE}")
        if not self.baseline_on_unavailable:  # an older graph: unavailable is missing to it
            tier = np.where(tier == TIER_UNAVAILABLE, TIER_MISSING, tier)
        if b == 0:
            return np.zeros(0, np.float32)
        inputs["embedding"] = np.where((tier >= TIER_MISSING)[:, None], 0.0, emb).astype(np.float32)
        inputs["tier"] = tier
        return self.session.run(inputs)["prob"].astype(np.float32, copy=False)
