"""Live model quality: NE of what the ranker *served*, joined to what users then did.

The ranker writes, per request, the ``vm_solaris`` probabilities it served (with the tiers it
read) and the plain VM's probabilities for the same candidates to the ``scores`` topic. Here the
labelled impressions are joined to those scores by ``(request_id, item_id)``; NE of both is
computed on exactly the impressions the ranker scored, next to the FM with *fresh* history on
the same impressions (computed here, offline, since the FM is too slow for the request path),
so the live transfer ratio TR = (NE_vm − NE_served) / (NE_vm − NE_fm) is measured on one set.
Its 95 % interval comes from a bootstrap over users (``models.metrics.user_bootstrap``).
The plain VM of the ``scores`` topic is the id-only verifier; given the bundle's fair VM, the
audit also scores it on the same impressions (offline, from the same histories as the FM) and
reports the gains and the transfer ratio against it (``vs_fair_vm``,
:func:`models.fair_gain.gains_over_fair_vm`, the simulator's definition).

The FM's history for an impression is what was known strictly before its request, built from
the impressions in event-time order exactly as the simulator builds it, so in a lockstep run the
result equals the simulator's ``transfer_ratio_at_achieved`` on the same requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.fair_gain import gains_over_fair_vm
from models.metrics import normalized_entropy, transfer_ratio, user_bootstrap
from schemas.errors import SchemaError
from schemas.records import ImpressionEvent
from streams.codecs import make_codec
from streams.engine.embedder import EmbeddingModel
from streams.engine.history import HistoryBook, UserHistory
from streams.engine.verifier import HistoryPairScorer
from streams.settings import Settings
from streams.topic_reader import read_topic

#: fewer joined impressions than this (or a single class) and no figure is reported
MIN_IMPRESSIONS = 20
NO_FAIR_VM = "the bundle has no fair VM (vm_fair.onnx): the ratio is against the id-only VM only"


@dataclass(frozen=True, slots=True)
class ServedScores:
    """One request as the ranker scored it (one ``scores`` message)."""

    user_id: int
    event_time_ms: int
    position: dict[int, int]  #: item id -> candidate index
    served: np.ndarray  #: float32 [n]: vm_solaris probabilities as served
    vm: np.ndarray  #: float32 [n]: the plain VM's probabilities
    tiers: np.ndarray  #: uint8 [n]: the tier each served embedding came from
    #: the read failed and the plain VM's scores were served (``needs_baseline``)
    fallback: bool = False

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ServedScores:
        items = [int(i) for i in body["items"]]
        return cls(
            int(body["user_id"]),
            int(body["event_time_ms"]),
            {item: j for j, item in enumerate(items)},
            np.asarray(body["scores"], np.float32),
            np.asarray(body.get("vm_scores", ()), np.float32),
            np.asarray(body.get("tiers", ()), np.uint8),
            bool(body.get("baseline_fallback", False)),
        )


@dataclass(frozen=True)
class JoinedRows:
    """Labelled impressions joined to their request's scores, in impression order."""

    users: np.ndarray  #: int64 [n]
    items: np.ndarray  #: int64 [n]
    times: np.ndarray  #: int64 [n]: the request's event time
    labels: np.ndarray  #: int8 [n]
    served: np.ndarray  #: float32 [n]
    vm: np.ndarray  #: float32 [n]
    tiers: np.ndarray  #: uint8 [n]
    histories: list[UserHistory]  #: the user's history strictly before the request
    unjoined: int  #: impressions whose request or item was not scored
    #: bool [n]: the row's request was served the plain VM (its read failed); None = none was
    fallback: np.ndarray | None = None


def join(
    scored: dict[str, ServedScores], impressions: Iterable[ImpressionEvent], history_len: int
) -> JoinedRows:
    """Join ``impressions`` (event-time order) to ``scored`` by request id and item."""
    book = HistoryBook(capacity=2 * history_len)
    cols: dict[str, list[Any]] = {k: [] for k in ("u", "i", "t", "y", "s", "v", "k", "h", "f")}
    unjoined = 0
    for imp in impressions:
        book.add(imp.user_id, imp.item_id, imp.label, imp.event_time_ms)
        req = scored.get(imp.request_id)
        j = req.position.get(imp.item_id) if req is not None else None
        if req is None or j is None or min(len(req.served), len(req.vm), len(req.tiers)) <= j:
            unjoined += 1
            continue
        cols["u"].append(imp.user_id)
        cols["i"].append(imp.item_id)
        cols["t"].append(req.event_time_ms)
        cols["y"].append(imp.label)
        cols["s"].append(req.served[j])
        cols["v"].append(req.vm[j])
        cols["k"].append(req.tiers[j])
        cols["h"].append(book.before(imp.user_id, req.event_time_ms, history_len))
        cols["f"].append(req.fallback)
    return JoinedRows(
        np.asarray(cols["u"], np.int64),
        np.asarray(cols["i"], np.int64),
        np.asarray(cols["t"], np.int64),
        np.asarray(cols["y"], np.int8),
        np.asarray(cols["s"], np.float32),
        np.asarray(cols["v"], np.float32),
        np.asarray(cols["k"], np.uint8),
        cols["h"],
        unjoined,
        np.asarray(cols["f"], bool),
    )


def fm_probabilities(rows: JoinedRows, fm: EmbeddingModel, batch: int = 4096) -> np.ndarray:
    """The FM's probability for each joined impression, with fresh history (float32 [n])."""
    out = np.zeros(len(rows.labels), np.float32)
    for s in range(0, len(out), batch):
        e = min(len(out), s + batch)
        _, logits = fm.embed(rows.users[s:e], rows.items[s:e], rows.times[s:e], rows.histories[s:e])
        out[s:e] = 1.0 / (1.0 + np.exp(-logits))
    return out


def fair_vm_probabilities(
    rows: JoinedRows, vm_fair: HistoryPairScorer, batch: int = 4096
) -> np.ndarray:
    """The fair VM's probability for each joined impression, from the same histories as the
    FM's (float32 [n])."""
    out = np.zeros(len(rows.labels), np.float32)
    for s in range(0, len(out), batch):
        e = min(len(out), s + batch)
        out[s:e] = vm_fair.score(
            rows.users[s:e], rows.items[s:e], rows.times[s:e], histories=rows.histories[s:e]
        )
    return out


def quality_summary(
    rows: JoinedRows, p_fm: np.ndarray, replicates: int = 500, p_fair: np.ndarray | None = None
) -> dict[str, Any]:
    """NE of vm, vm_solaris as served and the FM; live TR with a user-bootstrap 95 % interval;
    with ``p_fair``, the fair VM's NE and the gains and TR against it (``vs_fair_vm``)."""
    y = rows.labels
    out: dict[str, Any] = {"impressions": len(y), "unjoined": rows.unjoined}
    if len(y) < MIN_IMPRESSIONS or y.min() == y.max():
        out["note"] = f"too few labelled impressions with both classes ({len(y)})"
        return out
    ne = {
        "vm": normalized_entropy(y, rows.vm),
        "vm_solaris_served": normalized_entropy(y, rows.served),
        "fm": normalized_entropy(y, p_fm),
    }
    boot = user_bootstrap(
        rows.users,
        y,
        {"vm": [rows.vm], "fm": [p_fm], "vm_solaris_served": [rows.served]},
        {"served": "vm_solaris_served"},
        replicates=replicates,
    )
    out.update(
        ne=ne,
        transfer_ratio=transfer_ratio(ne["vm"], ne["vm_solaris_served"], ne["fm"]),
        transfer_ratio_ci=list(boot.tr_interval["served"]),
        ne_ci={k: list(v) for k, v in boot.ne_interval.items()},
    )
    if p_fair is None:
        out["vs_fair_vm"] = {"available": False, "reason": NO_FAIR_VM}
        return out
    ne["vm_fair"] = normalized_entropy(y, p_fair)
    probs = {"vm_fair": p_fair, "fm": p_fm, "vm_solaris_served": rows.served}
    gains = gains_over_fair_vm(rows.users, y, probs, "vm_solaris_served", replicates)
    out["vs_fair_vm"] = {"available": True, **gains}
    return out


def read_scores(settings: Settings) -> dict[str, ServedScores]:
    """The ranker's ``scores`` topic by request id (the last message wins on redelivery)."""
    out: dict[str, ServedScores] = {}
    for msg in read_topic(settings, settings.topic("scores")):
        if msg.value is None:
            continue
        try:
            body = json.loads(msg.value)
            out[str(body["request_id"])] = ServedScores.from_json(body)
        except (ValueError, KeyError, TypeError):
            continue  # not a scores message: nothing to join
    return out


def read_impressions(settings: Settings) -> list[ImpressionEvent]:
    """The valid impressions of the ``impressions`` topic in event-time order (the per-user
    order of the topic is kept for equal times: one user's events share a partition)."""
    codec = make_codec(settings)
    out: list[ImpressionEvent] = []
    for msg in read_topic(settings, settings.topic("impressions")):
        try:
            out.append(codec.decode(msg.value, ImpressionEvent))
        except SchemaError:
            continue  # dead-lettered by the pipeline
    out.sort(key=lambda e: e.event_time_ms)  # stable: keeps partition order on ties
    return out


def live_quality(
    settings: Settings,
    fm: EmbeddingModel,
    replicates: int = 500,
    vm_fair: HistoryPairScorer | None = None,
) -> dict[str, Any]:
    """Read ``scores`` and ``impressions`` back from Kafka and measure live quality (against
    the fair VM too when the bundle has one)."""
    rows = join(read_scores(settings), read_impressions(settings), settings.history_len)
    p_fair = (
        fair_vm_probabilities(rows, vm_fair) if vm_fair is not None and len(rows.labels) else None
    )
    return quality_summary(rows, fm_probabilities(rows, fm), replicates, p_fair)


class QualityMeter:
    """Running NE of the plain VM and of ``vm_solaris`` as served, joined in the ranker.

    The ranker remembers each request's scores (the newest ``max_pending`` requests) and joins
    the impressions it consumes to them. Requests and impressions come from two topics with no
    order between them, so an impression that arrives first waits (the newest ``max_pending``
    waiting impressions) until its request is ranked. Counted as unjoined: an impression of an
    item that was not a candidate, or one that waited too long. Exported to Prometheus; the
    transfer ratio needs the FM's NE and is computed offline (:func:`live_quality`).
    """

    def __init__(self, max_pending: int = 100_000) -> None:
        self.max_pending = max_pending
        self._pending: dict[str, tuple[dict[int, int], np.ndarray, np.ndarray]] = {}
        self._waiting: dict[str, list[ImpressionEvent]] = {}
        self._n_waiting = 0
        self.joined = 0
        self.unjoined = 0
        self.positives = 0
        self.logloss = {"vm": 0.0, "vm_solaris_served": 0.0}

    def on_scored(
        self, request_id: str, items: np.ndarray, served: np.ndarray, vm: np.ndarray
    ) -> None:
        if not len(served) or not len(vm):
            return
        self._pending[request_id] = ({int(i): j for j, i in enumerate(items)}, served, vm)
        if len(self._pending) > self.max_pending:  # dicts keep insertion order: drop the oldest
            del self._pending[next(iter(self._pending))]
        for imp in self._waiting.pop(request_id, []):
            self._n_waiting -= 1
            self._join(imp)

    def on_impression(self, imp: ImpressionEvent) -> bool:
        """Join one impression (or keep it until its request is ranked); True if joined now."""
        if imp.request_id not in self._pending:
            self._waiting.setdefault(imp.request_id, []).append(imp)
            self._n_waiting += 1
            while self._n_waiting > self.max_pending:
                oldest = next(iter(self._waiting))
                dropped = self._waiting.pop(oldest)
                self._n_waiting -= len(dropped)
                self.unjoined += len(dropped)
            return False
        return self._join(imp)

    def _join(self, imp: ImpressionEvent) -> bool:
        position, served, vm = self._pending[imp.request_id]
        j = position.get(imp.item_id)
        if j is None:
            self.unjoined += 1
            return False
        y = float(imp.label)
        for name, probs in (("vm", vm), ("vm_solaris_served", served)):
            p = min(max(float(probs[j]), 1e-7), 1 - 1e-7)
            self.logloss[name] -= y * np.log(p) + (1 - y) * np.log(1 - p)
        self.joined += 1
        self.positives += imp.label
        return True

    @property
    def waiting(self) -> int:
        """Impressions waiting for their request's scores."""
        return self._n_waiting

    def ne(self) -> dict[str, float] | None:
        """NE per model over the joined impressions; None until both classes were seen."""
        if not self.joined or self.positives in (0, self.joined):
            return None
        rate = self.positives / self.joined
        h = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))
        return {name: float(ll / self.joined / h) for name, ll in self.logloss.items()}
