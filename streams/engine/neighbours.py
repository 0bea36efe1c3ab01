"""Similar users for the neighbour tier: a cosine KNN index over a user representation that
exists even for users without FM embeddings.

Representation: the mean of *item vectors* (from the model bundle) of the candidates the user was
recently shown, as an exponential moving average over their requests. The same representation
can be built at ranking time from the request's own candidate list, so a user on their *first*
request still finds neighbours (``neighbours_for_items``). The index holds only users that have a
fresh aggregate, i.e. users whose embeddings can stand in for others.

Search: exact (matrix products over blocks of queries) up to ``exact_max`` users, hnswlib
(HNSW, cosine) above.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from schemas.records import NeighbourList
from streams.engine.undo import UndoLog

#: similarities computed at once by the exact search (4 MiB of float32): bounds a refresh's
#: peak memory whatever the number of users (see :meth:`NeighbourIndex._exact_top`)
EXACT_BLOCK_FLOATS = 1 << 20


class ItemVectors(Protocol):
    """Dense item vectors; unknown items map to zeros."""

    dim: int
    #: float32 [dim]: the mean item vector, removed before cosine (see UserRepresentations)
    mean: np.ndarray

    def lookup(self, item_ids: np.ndarray) -> np.ndarray:
        """float32 ``[n, dim]`` for int64 ``[n]``."""
        ...


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    out: np.ndarray = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return out


class UserRepresentations:
    """Per-user EMA of mean candidate item vectors (``alpha`` = weight of the newest request).

    The catalogue's mean item vector is subtracted before normalising: every user's mean of
    dozens of item vectors points almost along that common direction, which made all cosine
    similarities 0.993–0.997 (p10–p90, synthetic traffic) so that a minimum similarity could
    not tell a close neighbour from an arbitrary one. Centred, they spread over 0.63–0.96.
    """

    def __init__(
        self, items: ItemVectors, alpha: float = 0.5, version_tag: int | None = None
    ) -> None:
        self.items = items
        self.alpha = alpha
        #: the model version (CRC32 tag) of ``items``: saved representations of another are
        #: refused (``steps.speculate.restore_representation``); None = accept any (tools)
        self.version_tag = version_tag
        #: saved representations refused as another model's (version tag or dimension)
        self.foreign = 0
        self._vec: dict[int, np.ndarray] = {}
        self._seen_at: dict[int, int] = {}
        self._undo: UndoLog | None = None

    def begin(self, undo: UndoLog) -> None:
        """Record every change in ``undo`` until :meth:`end` (one live batch: a rerun after an
        infrastructure error must not fold the same request in twice)."""
        self._undo = undo

    def end(self) -> None:
        self._undo = None

    @property
    def undo(self) -> UndoLog | None:
        """The log recording changes now (None: none)."""
        return self._undo

    def _touch(self, user_id: int) -> None:
        if self._undo is not None:  # vectors are replaced, never changed in place
            self._undo.entry(self._vec, user_id)
            self._undo.entry(self._seen_at, user_id)

    def of_items(self, item_ids: Sequence[int]) -> np.ndarray:
        """Unit-norm mean item vector of ``item_ids`` (zeros if none known)."""
        out: np.ndarray = self.of_items_many([item_ids])[0]
        return out

    def of_items_many(self, lists: Sequence[Sequence[int]]) -> np.ndarray:
        """:meth:`of_items` of each list, float32 ``[len(lists), dim]``, with one gather and
        one segmented sum for them all (the speculate step's requests of a batch). A row does
        not depend on the other lists (each segment is summed on its own, in order), so a
        batch of one and a batch of many give the same bits: the simulator's and the live
        agent's representations agree exactly."""
        counts = np.fromiter((len(ids) for ids in lists), np.int64, len(lists))
        out = np.zeros((len(lists), self.items.dim), np.float32)
        some = counts > 0
        if not some.any():
            return out
        ids = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(counts.sum()))
        starts = (np.cumsum(counts) - counts)[some]
        sums = np.add.reduceat(self.items.lookup(ids), starts, axis=0)
        out[some] = _normalise(sums / counts[some, None].astype(np.float32) - self.items.mean)
        return out

    def observe(
        self,
        user_id: int,
        item_ids: Sequence[int],
        event_time_ms: int,
        of_items: np.ndarray | None = None,
    ) -> None:
        """Fold one request's candidates into the user's EMA; ``of_items``: their
        :meth:`of_items`, when the caller computed it for a whole batch."""
        self._touch(user_id)
        new = self.of_items(item_ids) if of_items is None else of_items
        old = self._vec.get(user_id)
        self._vec[user_id] = (
            new if old is None else _normalise((1 - self.alpha) * old + self.alpha * new)
        )
        self._seen_at[user_id] = event_time_ms

    def vector(self, user_id: int) -> np.ndarray:
        return self._vec[user_id]

    def set(self, user_id: int, vector: np.ndarray, seen_at_ms: int) -> bool:
        """Restore a representation (e.g. from a Faust table after a restart). Refused (False)
        when its dimension is not the item vectors': saved by a model with other item vectors
        (an upgrade), it would fail every later similarity with this user (issue 24, item 4)."""
        vec = np.asarray(vector, np.float32)
        if vec.shape != (self.items.dim,):
            return False
        self._touch(user_id)
        self._vec[user_id] = vec
        self._seen_at[user_id] = seen_at_ms
        return True

    def forget_before(self, t_ms: int) -> int:
        """Drop the users not seen since ``t_ms``; returns how many. A returning user's
        representation comes back from its saved value (``observe_representation``)."""
        old = [u for u, t in self._seen_at.items() if t < t_ms]
        for u in old:
            self._touch(u)
            del self._vec[u], self._seen_at[u]
        return len(old)

    def has(self, user_id: int) -> bool:
        return user_id in self._vec

    def seen_at(self, user_id: int) -> int | None:
        """Event time of the user's last observed request (None: not held)."""
        return self._seen_at.get(user_id)

    def forget(self, user_id: int) -> None:
        """Drop one user's representation (a no-op for a user not held)."""
        self._touch(user_id)
        self._vec.pop(user_id, None)
        self._seen_at.pop(user_id, None)

    def active_since(self, since_ms: int) -> list[int]:
        return [u for u, t in self._seen_at.items() if t >= since_ms]

    def get(self, user_ids: Sequence[int]) -> np.ndarray:
        return (
            np.stack([self._vec[u] for u in user_ids])
            if user_ids
            else np.zeros((0, self.items.dim), np.float32)
        )


@dataclass(frozen=True, slots=True)
class NeighbourConfig:
    k: int
    min_similarity: float
    exact_max: int
    #: rebuild the index and lists every this much event time
    interval_ms: int
    #: ... and earlier when the users with an aggregate have grown by this factor since the last
    #: build, so a cold index fills within minutes instead of one interval (1 = interval only)
    growth_factor: float


class NeighbourIndex:
    """Cosine KNN over a fixed set of users; rebuilt (not updated) on each refresh."""

    def __init__(
        self,
        user_ids: Sequence[int],
        vectors: np.ndarray,
        reps: UserRepresentations,
        config: NeighbourConfig,
    ) -> None:
        self.config = config
        self.reps = reps
        self.user_ids = np.asarray(user_ids, np.int64)
        self._vectors = _normalise(np.asarray(vectors, np.float32))
        self._hnsw = None
        if len(self.user_ids) > config.exact_max:
            import hnswlib

            index = hnswlib.Index(space="cosine", dim=self._vectors.shape[1])
            index.init_index(
                max_elements=len(self.user_ids), ef_construction=100, M=16, random_seed=7
            )
            index.add_items(self._vectors, np.arange(len(self.user_ids)))
            index.set_ef(max(64, 4 * config.k))
            self._hnsw = index

    def __len__(self) -> int:
        return len(self.user_ids)

    @property
    def vectors(self) -> np.ndarray:
        """Unit-norm float32 ``[n, dim]`` (row i is user ``user_ids[i]``)."""
        return self._vectors

    def query(
        self, vectors: np.ndarray, k: int, exclude: Sequence[int] = ()
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query row: ``(user_ids, cosine similarities)`` best first, excluding ``exclude[i]``."""
        if len(self.user_ids) == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(vectors))]
        q = _normalise(np.asarray(vectors, np.float32))
        kk = min(k + 1, len(self.user_ids))
        if self._hnsw is not None:
            labels, dist = self._hnsw.knn_query(q, k=kk)
            sims = 1.0 - dist
        else:
            labels, sims = self._exact_top(q, kk)
        out = []
        for row, (lab, sim) in enumerate(zip(labels, sims, strict=True)):
            ids = self.user_ids[lab]
            keep = sim > self.config.min_similarity
            if row < len(exclude):
                keep &= ids != exclude[row]
            out.append((ids[keep][:k], sim[keep][:k].astype(np.float32)))
        return out

    def _exact_top(self, q: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``kk`` most similar indexed users of each row of ``q``, best first, by brute
        force in blocks of rows: a refresh queries every active user against every indexed
        one, and one ``[queries, users]`` product (plus its negation for the partition) was
        tens of MB at a few thousand users, memory the allocator kept after the refresh
        (issue 24 item 5). Each row's answer is the same as in one product."""
        n = len(self.user_ids)
        rows = max(1, EXACT_BLOCK_FLOATS // n)
        labels = np.empty((len(q), kk), np.int64)
        sims = np.empty((len(q), kk), np.float32)
        for start in range(0, len(q), rows):
            block = q[start : start + rows] @ self._vectors.T
            if kk < n:
                top = np.argpartition(-block, kk - 1, axis=1)[:, :kk]
            else:
                top = np.broadcast_to(np.arange(n), block.shape)
            top_sims = np.take_along_axis(block, top, axis=1)
            order = np.argsort(-top_sims, axis=1, kind="stable")
            labels[start : start + rows] = np.take_along_axis(top, order, axis=1)
            sims[start : start + rows] = np.take_along_axis(top_sims, order, axis=1)
        return labels, sims

    def neighbours_for_items(
        self, item_ids: Sequence[int], k: int, exclude_user: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Cold start: neighbours of the representation of ``item_ids`` (a request's candidates)."""
        return self.query(self.reps.of_items(item_ids)[None, :], k, [exclude_user])[0]

    def lists_for(self, user_ids: Sequence[int], event_time_ms: int) -> list[NeighbourList]:
        """Neighbour lists for ``user_ids`` (which need not be in the index)."""
        if not user_ids:
            return []
        results = self.query(self.reps.get(user_ids), self.config.k, user_ids)
        return [
            NeighbourList(
                int(u), event_time_ms, tuple(int(i) for i in ids), tuple(float(w) for w in ws)
            )
            for u, (ids, ws) in zip(user_ids, results, strict=True)
            if len(ids)
        ]


def build_index(
    reps: UserRepresentations, indexed_users: Sequence[int], config: NeighbourConfig
) -> NeighbourIndex:
    """An index over ``indexed_users`` that have a representation."""
    users = [u for u in indexed_users if reps.has(u)]
    return NeighbourIndex(users, reps.get(users), reps, config)


class RefreshClock:
    """When the next neighbour refresh is due, in event time (shared by simulator and workers).

    Due every ``interval_ms``, or earlier once the population the index is built from (users with
    an aggregate) has grown ``growth_factor``-fold since the last build: after a cold start the
    index is rebuilt at 1, 2, 4, … users (cheap while small) instead of staying nearly empty for a
    whole interval; in steady state the population grows slowly and the interval governs.
    """

    def __init__(self, interval_ms: int, ttl_ms: int, growth_factor: float = 2.0) -> None:
        if growth_factor < 1.0:
            raise ValueError(f"growth_factor must be >= 1, got {growth_factor}")
        self.interval_ms = interval_ms
        self.ttl_ms = ttl_ms
        self.growth_factor = growth_factor
        self.last_ms: int | None = None
        self.last_population = 0

    def due(self, t: int, population: int | None = None) -> bool:
        if self.last_ms is None or t - self.last_ms >= self.interval_ms:
            return True
        if population is None or self.growth_factor <= 1.0:
            return False
        return population >= max(1.0, self.growth_factor * self.last_population)

    def start(self, t: int, population: int = 0) -> int:
        """Mark a refresh at ``t`` over ``population`` users; returns since when users count as
        active (the last refresh)."""
        since = self.last_ms if self.last_ms is not None else t - self.ttl_ms
        self.last_ms = t
        self.last_population = population
        return since


def fresh_users(
    newest: dict[int, int], reps: UserRepresentations, t: int, horizon_ms: int
) -> list[int]:
    """Users whose newest aggregate is within ``horizon_ms`` of ``t`` (the index's population);
    older entries of ``newest`` and representations not seen since ``t - horizon_ms`` are
    forgotten, so a worker's memory follows its active users, not every user it ever saw
    (issue 24, item 5). Simulator and workers call it at the same refreshes: same state."""
    for u in [u for u, tn in newest.items() if t - tn > horizon_ms]:
        del newest[u]
    reps.forget_before(t - horizon_ms)
    return list(newest)


def refresh(
    reps: UserRepresentations,
    fresh_users: Sequence[int],
    since_ms: int,
    t: int,
    config: NeighbourConfig,
) -> tuple[NeighbourIndex, list[NeighbourList]]:
    """Rebuild the index over ``fresh_users`` and the lists of users active since ``since_ms``.

    Lists are (re)written only for users active since the previous refresh: older lists stay
    valid for the neighbour TTL, and users not seen for a while use the cold-start query.
    """
    index = build_index(reps, fresh_users, config)
    return index, index.lists_for(reps.active_since(since_ms), t)
