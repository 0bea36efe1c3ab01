"""Rolling per-user aggregate: mean of the user's pair embeddings over the last 24 h of event time.

State is bucketed (``bucket_ms``, default 1 h): per bucket the vector sum, the count and the
``(item, event time)`` keys it counted (:class:`SeenKeys`). A new embedding lands in its bucket;
buckets that end before ``newest - window`` are evicted by *event time* (not Faust's wall-clock
window expiry, which would purge replayed traffic), keys and all. The window is therefore exact
to one bucket. State serialises to plain JSON for a Faust table; a bucket's keys stay encoded
until a test or an add reaches that bucket, so a batch that adds to the newest bucket decodes
and re-encodes that bucket's keys only, not a day of them.

The keys are what make a redelivery count once, and they grow with a user's traffic (a bot
sending 1,000 new candidates a request fills a day with 10^5 of them, past Kafka's message
limit for the table's changelog). ``max_keys`` bounds them: past it the oldest buckets are
*sealed*: their sums and counts stay in the aggregate, their keys go, and an embedding that
arrives later into a sealed bucket is dropped and counted (``sealed_dropped``), since a new one
could not be told from a redelivery. The newest bucket is sealed last, only when it alone is
over the limit.

An aggregate never mixes FM versions: the state holds one version; an embedding of another
version restarts the user's buckets for it (an FM upgrade, or a rollback), unless it is a *late*
embedding of a version this state already left (at or before the newest event time folded under
that version: a redelivery from before the switch), which is dropped and counted.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas.records import EmbeddingBatch, PairEmbedding, UserAggregate
from schemas.vectors import VectorDtype
from streams.engine.embedded_runs import EmbeddedRun, runs_of
from streams.engine.errors import StepError
from streams.engine.packed import FLOAT64, INT64, pack, unpack

log = logging.getLogger(__name__)
#: versions a state remembers having left (an upgrade and a rollback or two)
MAX_RETIRED = 4


def _encode_keys(keys: Iterable[tuple[int, int]]) -> str:
    """A bucket's keys as packed int64 ``(item, event time)`` pairs, sorted (the same text
    each run)."""
    return pack(np.array(sorted(keys), dtype=INT64).reshape(-1, 2), INT64)


def _decode_keys(text: str) -> set[tuple[int, int]]:
    pairs = unpack(text, INT64, 2)
    return set(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist(), strict=True))


class SeenKeys:
    """The ``(item_id, event_time_ms)`` of every embedding a state counted, per bucket start.

    A bucket's keys are decoded on first use and encoded again only if they changed; a key
    belongs to the bucket with the largest start at or before its time (buckets are aligned, so
    that is its own bucket whenever it was counted), so a membership test needs no bucket width.
    Compares equal to a set of the same keys.
    """

    __slots__ = ("_decoded", "_encoded")

    def __init__(self, encoded: dict[int, str] | None = None) -> None:
        #: start -> the bucket's keys as read, while they have not changed
        self._encoded: dict[int, str] = encoded or {}
        self._decoded: dict[int, set[tuple[int, int]]] = {}  #: start -> keys, once used

    @classmethod
    def of(cls, keys: Iterable[tuple[int, int]], starts: Iterable[int]) -> SeenKeys:
        """``keys`` spread over the buckets ``starts`` (a key before every start is dropped)."""
        out = cls()
        ordered = sorted(starts)
        for key in keys:
            start = _start_of(ordered, key[1])
            if start is not None:
                out.add(start, key)
        return out

    def _bucket(self, start: int) -> set[tuple[int, int]]:
        keys = self._decoded.get(start)
        if keys is None:
            text = self._encoded.get(start)
            keys = self._decoded[start] = set() if text is None else _decode_keys(text)
        return keys

    def starts(self) -> list[int]:
        return sorted(self._encoded.keys() | self._decoded.keys())

    def has(self, start: int, key: tuple[int, int]) -> bool:
        """Whether ``key``, of the bucket at ``start``, was counted."""
        return (start in self._encoded or start in self._decoded) and key in self._bucket(start)

    def add(self, start: int, key: tuple[int, int]) -> None:
        self._bucket(start).add(key)
        self._encoded.pop(start, None)  # changed: encoded again when saved

    def admit(self, start: int, keys: list[tuple[int, int]]) -> list[int]:
        """Count each of ``keys`` (all of the bucket at ``start``) not counted yet, a repeat
        within ``keys`` included; the positions of those counted now."""
        if not keys:
            return []
        bucket = self._bucket(start)
        fresh: list[int] = []
        for j, key in enumerate(keys):
            if key not in bucket:
                bucket.add(key)
                fresh.append(j)
        if fresh:
            self._encoded.pop(start, None)  # changed: encoded again when saved
        return fresh

    def count(self) -> int:
        """How many keys, without decoding a bucket that was not used."""
        return sum(self.count_of(start) for start in self.starts())

    def count_of(self, start: int) -> int:
        """The bucket's keys, from its encoded length when not decoded (16 bytes a key, base64)."""
        keys = self._decoded.get(start)
        if keys is not None:
            return len(keys)
        return len(self._encoded.get(start, "")) * 3 // 4 // 16

    def drop(self, start: int) -> None:
        """Forget a bucket's keys (the bucket left the window)."""
        self._encoded.pop(start, None)
        self._decoded.pop(start, None)

    def clear(self) -> None:
        self._encoded.clear()
        self._decoded.clear()

    def encoded(self, start: int) -> str:
        """The bucket's keys for a table value: the text read, unless the bucket changed."""
        text = self._encoded.get(start)
        return _encode_keys(self._decoded.get(start, ())) if text is None else text

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        start = _start_of(self.starts(), key[1])
        return start is not None and self.has(start, key)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for start in self.starts():
            yield from self._bucket(start)

    def __len__(self) -> int:
        return sum(len(self._bucket(start)) for start in self.starts())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SeenKeys | set | frozenset):
            return set(self) == set(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable


def _start_of(ordered_starts: list[int], t: int) -> int | None:
    """The largest start at or before ``t`` (None: ``t`` is before every bucket)."""
    i = bisect.bisect_right(ordered_starts, t)
    return ordered_starts[i - 1] if i else None


@dataclass(slots=True)
class AggregateState:
    """Bucketed sums of one user: ``bucket start -> (count, sum float64 [dim])``."""

    buckets: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)
    newest_ms: int = 0
    #: (item_id, event_time_ms) already counted, so redelivered embeddings are not counted twice
    seen: SeenKeys = field(default_factory=SeenKeys)
    #: model version of every embedding in ``buckets``; None = unknown (a new state, or one
    #: written before versions were stored: the first embedding then restarts it)
    version: str | None = None
    #: versions this state left -> newest event time folded under each (late ones are dropped)
    retired: dict[str, int] = field(default_factory=dict)
    #: starts of buckets whose keys were dropped for the key budget (late embeddings refused)
    sealed: set[int] = field(default_factory=set)

    def restart(self, version: str) -> None:
        """Empty the buckets and start over for ``version``, remembering the version left."""
        if self.version is not None and self.version != version:
            self.retired[self.version] = max(self.newest_ms, self.retired.get(self.version, 0))
            for old in sorted(self.retired, key=self.retired.__getitem__)[:-MAX_RETIRED]:
                del self.retired[old]
        self.retired.pop(version, None)
        self.buckets.clear()
        self.seen.clear()
        self.sealed.clear()
        self.newest_ms = 0
        self.version = version

    def to_json(self) -> dict[str, Any]:
        """JSON-safe form for a Faust table; sums travel as base64 float64 bytes (exact, and far
        cheaper to encode and decode than lists of floats on every embedding), each bucket's
        counted keys as base64 int64 pairs next to it."""
        out = {
            "b": {
                str(k): [
                    c,
                    pack(s, FLOAT64),
                    self.seen.encoded(k),
                ]
                for k, (c, s) in self.buckets.items()
            },
            "n": self.newest_ms,
            "v": self.version,
            "r": self.retired,
        }
        if self.sealed:
            out["z"] = sorted(self.sealed)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> AggregateState:
        if not data:
            return cls()
        buckets = {int(k): (int(v[0]), unpack(v[1], FLOAT64).copy()) for k, v in data["b"].items()}
        return cls(
            buckets,
            int(data["n"]),
            seen_of_table(data),
            data.get("v"),  # absent in state written before versions were stored
            {str(k): int(t) for k, t in data.get("r", {}).items()},
            {int(z) for z in data.get("z", ())},
        )


def seen_of_table(data: dict[str, Any]) -> SeenKeys:
    """The counted keys of a stored state, without decoding its sums; a value written before
    the keys were kept per bucket (2026-12-06) holds them in one list (``"s"``)."""
    if "s" in data:
        return SeenKeys.of(((int(i), int(t)) for i, t in data["s"]), map(int, data["b"]))
    return SeenKeys({int(k): v[2] for k, v in data["b"].items()})


def check_model_dim(version: str, dim: int, own_version: str, own_dim: int) -> None:
    """Refuse (:class:`StepError`) an embedding of the worker's own FM version whose dim is not that
    FM's output dim: it cannot come from that model, and folded into a new user's buckets it
    would be stored as an aggregate every reader discards as corrupt.

    An embedding of *another* version is accepted and not checked here (this worker cannot know
    that model's dim): in an FM upgrade the new FM workers run before the pipeline worker is
    restarted on the new bundle. Note what that costs: such an embedding restarts the user's
    buckets (see :class:`AggregateState`), so one message of a foreign version empties the
    user's aggregate until more of that version arrive.
    """
    if version == own_version and dim != own_dim:
        raise StepError(
            f"embedding of dim {dim} for model version {version!r}, whose FM outputs {own_dim}"
        )


class RollingAggregator:
    """Adds pair embeddings to per-user state and emits the user's current aggregate."""

    def __init__(
        self,
        window_ms: int,
        bucket_ms: int,
        own: tuple[str, int] | None = None,
        max_keys: int = 0,
    ) -> None:
        """``own`` = (model version, dim) of the driver's FM: its embeddings of another dim are
        refused (:func:`check_model_dim`) by both drivers, not only the live agent.
        ``max_keys``: the key budget of one user's state (0: none; see the module)."""
        if window_ms % bucket_ms:
            raise ValueError("window_ms must be a multiple of bucket_ms")
        self.window_ms = window_ms
        self.bucket_ms = bucket_ms
        self.own = own
        self.max_keys = max_keys
        #: embeddings dropped as late arrivals of a version their user's state already left
        self.stale_dropped = 0
        #: embeddings dropped because their bucket was sealed for the key budget
        self.sealed_dropped = 0
        #: keys dropped when buckets were sealed
        self.keys_dropped = 0

    def add(
        self, state: AggregateState, embeddings: EmbeddingBatch | Iterable[PairEmbedding]
    ) -> UserAggregate | None:
        """Fold ``embeddings`` (all of one user: a message of the FM worker, or pair records)
        into ``state``; the new aggregate, or None. Raises before changing ``state`` when one
        of them is of the own FM's version with another dim, or its bytes do not decode.

        The embeddings are folded as runs of one version and event time
        (:func:`runs_of`): one decode and one sum per run, not one per pair; the rules are the
        per-embedding ones (a run shares its bucket, its version switch and its expiry)."""
        runs = runs_of(embeddings)
        if self.own is not None:
            for run in runs:
                check_model_dim(run.model_version, run.dim, *self.own)
        last: EmbeddedRun | None = None
        for run in runs:
            if self._fold(state, run):
                last = run
        if last is None:
            return None
        self._evict(state)
        if self.max_keys and state.seen.count() > self.max_keys:
            self._seal(state)
        count = sum(c for c, _ in state.buckets.values())
        if count == 0:
            return None
        mean = sum(s for _, s in state.buckets.values()) / count
        return UserAggregate.from_array(
            last.user_id,
            state.newest_ms,
            self.window_ms,
            count,
            state.version or last.model_version,
            np.asarray(mean, np.float32),
            VectorDtype(last.dtype),
        )

    def _fold(self, state: AggregateState, run: EmbeddedRun) -> bool:
        """Count ``run``'s embeddings not counted before; whether any was."""
        if run.model_version != state.version and not self._switch(state, run):
            return False
        dim = next(iter(state.buckets.values()))[1].shape[0] if state.buckets else run.dim
        if run.dim != dim:
            raise StepError(
                f"embedding of dim {run.dim} for user {run.user_id}'s {dim}-dim aggregate "
                f"(model version {run.model_version})"
            )
        t = run.event_time_ms
        start = t - t % self.bucket_ms
        if start in state.sealed:
            self.sealed_dropped += len(run.item_ids)
            return False
        if self._expired(state, start):
            # its bucket already left the window, and with it the record of whether these were
            # counted (a redelivery must not count twice)
            return False
        fresh = state.seen.admit(start, [(item, t) for item in run.item_ids])  # not redeliveries
        if not fresh:
            return False
        rows = run.vectors if len(fresh) == len(run.item_ids) else run.vectors[fresh]
        count, total = state.buckets.get(start, (0, np.zeros(run.dim, np.float64)))
        # row by row, in order (numpy reduces axis 0 sequentially): the sums a pair-by-pair
        # fold gives, bit for bit
        summed = np.add.reduce(np.vstack([total[None, :], rows.astype(np.float64)]), axis=0)
        state.buckets[start] = (count + len(fresh), summed)
        state.newest_ms = max(state.newest_ms, t)
        return True

    def _switch(self, state: AggregateState, run: EmbeddedRun) -> bool:
        """Restart ``state`` for ``run``'s version; False (drop it) if it is a late run of a
        version the state already left."""
        left_at = state.retired.get(run.model_version)
        if left_at is not None and run.event_time_ms <= left_at:
            self.stale_dropped += len(run.item_ids)
            log.info(
                "dropped a late embedding of a retired model version",
                extra={
                    "user_id": run.user_id,
                    "version": run.model_version,
                    "current": state.version,
                    "embeddings": len(run.item_ids),
                },
            )
            return False
        if state.version is not None or state.buckets:
            log.info(
                "model version changed: user aggregate restarted",
                extra={"user_id": run.user_id, "from": state.version, "to": run.model_version},
            )
        state.restart(run.model_version)
        return True

    def _expired(self, state: AggregateState, bucket_start: int) -> bool:
        """A bucket [start, start + bucket) is kept while it overlaps (newest - window, newest]."""
        return bucket_start + self.bucket_ms <= state.newest_ms - self.window_ms

    def _seal(self, state: AggregateState) -> None:
        """Drop the keys of the oldest buckets until the state is within ``max_keys``."""
        total = state.seen.count()
        for start in state.seen.starts():
            if total <= self.max_keys:
                break
            n = state.seen.count_of(start)
            state.seen.drop(start)
            state.sealed.add(start)
            total -= n
            self.keys_dropped += n
            log.info(
                "sealed an aggregate bucket: its keys exceeded the budget",
                extra={"bucket_start_ms": start, "keys_dropped": n, "max_keys": self.max_keys},
            )

    def _evict(self, state: AggregateState) -> None:
        state.sealed = {s for s in state.sealed if not self._expired(state, s)}
        expired = [s for s in state.buckets if self._expired(state, s)]
        for start in expired:
            # Dedup entries live exactly as long as the bucket that counted them: dropping them
            # at the horizon while their bucket stayed let a late redelivery be counted twice.
            del state.buckets[start]
            state.seen.drop(start)
