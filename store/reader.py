"""The ranker's read API: per candidate, the best fresh tier in at most two store round trips.

Tiers, in order (see :class:`store.tiers.Tier`): exact pair -> the user's FM *state* decoded
for the candidate (only with a :class:`StateDecoder`; item-aware, issue 22) -> user aggregate ->
*neighbour_item* (similarity-weighted mean of the neighbours' embedding of that item) ->
*neighbour_aggregate* (of their aggregates: item-blind) -> missing (zeros). A stored value serves a request only if it was produced from an *earlier*
event (``value.event_time_ms < request event_time_ms``) and is within its TTL at the request's
event time: physical expiry in the store is never trusted for freshness.

The reader never raises to the ranker and never blocks much past its deadline: on deadline,
store error or anything unexpected the lookup's candidates are missing (a value already found
in round 1 is kept on a round-2 timeout or store error), counted once per lookup by reason in
:attr:`FeatureReader.stats`. A lookup that ends past its deadline for any reason counts as a
timeout. Corrupt values (see :mod:`store.values`) are counted per value and never served.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from schemas.limits import MIN_EVENT_TIME_MS
from schemas.records import PairEmbedding
from store.batch_decode import decode_many, decode_rows
from store.errors import CorruptValue, StoreError, StoreTimeout
from store.history_values import StoredHistory, decode_history
from store.keys import PairGrid
from store.neighbour_blend import blend_neighbours, fresh_mask
from store.protocol import FeatureStore, ReadBatch
from store.reader_config import ReaderConfig as ReaderConfig  # re-exported
from store.reader_config import ReaderStats as ReaderStats  # re-exported
from store.reader_types import ColdStartIndex as ColdStartIndex  # re-exported
from store.reader_types import Lookup as Lookup
from store.reader_types import RequestFeatures as RequestFeatures
from store.reader_types import StateDecoder as StateDecoder
from store.reader_types import Warmable as Warmable
from store.state_slots import split_states
from store.tiers import Tier
from store.values import StoredVector, decode_neighbours, decode_vector, encode_pair

log = logging.getLogger(__name__)


def _probe_value(dim: int) -> bytes:
    """A valid pair value, decoded once at construction to pay numpy's first-call costs."""
    return encode_pair(
        PairEmbedding.from_array(0, 0, MIN_EVENT_TIME_MS, "probe", np.zeros(dim, np.float32))
    )


class FeatureReader:
    """Batched tiered lookups for one request at a time. Not thread-safe (one per thread)."""

    def __init__(
        self,
        store: FeatureStore,
        config: ReaderConfig,
        cold_start: ColdStartIndex | None = None,
        states: StateDecoder | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.cold_start = cold_start
        #: with a decoder, round 1 also reads the user's state and serves the state tier
        self.states = states
        self.stats = ReaderStats()
        #: user -> the neighbours its last lookup read, least recently used first
        self._hints: OrderedDict[int, tuple[int, ...]] = OrderedDict()
        if isinstance(store, Warmable):  # connect now, not inside the first lookup's deadline
            store.warm()
        decode_many([_probe_value(self.config.dim)], self.config.dim)  # first-call costs, too
        if states is not None:  # the decoder's first run (session set-up) before any deadline
            self._warm_decoder(states)

    def _warm_decoder(self, states: StateDecoder) -> None:
        try:
            states.decode(np.zeros(1, np.int64), np.zeros((1, states.width), np.float32))
        except Exception:  # a broken decoder shows in lookups (counted), not here
            log.warning("state decoder warm-up failed", exc_info=True)

    def lookup(
        self,
        user_id: int,
        item_ids: Sequence[int],
        event_time_ms: int,
        deadline_ms: float | None = None,
    ) -> Lookup:
        """Tiered embeddings of ``item_ids`` for ``user_id`` as of ``event_time_ms``.

        Blocks at most about ``deadline_ms`` (default from the config) in total; never raises.
        """
        return self._lookup(user_id, item_ids, event_time_ms, deadline_ms, None)

    def lookup_with_history(
        self,
        user_id: int,
        item_ids: Sequence[int],
        event_time_ms: int,
        deadline_ms: float | None = None,
    ) -> RequestFeatures:
        """:meth:`lookup`, and the user's stored history from the same first round trip (what
        a fair VM's streaming features are computed from). Never raises."""
        box: list[StoredHistory] = []
        found = self._lookup(user_id, item_ids, event_time_ms, deadline_ms, box)
        return RequestFeatures(found, box[0] if box else None)

    def _lookup(
        self,
        user_id: int,
        item_ids: Sequence[int],
        event_time_ms: int,
        deadline_ms: float | None,
        history: list[StoredHistory] | None,
    ) -> Lookup:
        """:meth:`lookup`; with ``history`` (a list), round 1 also reads the user's history and
        appends it there (nothing is appended when the read fails)."""
        start = time.perf_counter()
        budget = self.config.deadline_ms if deadline_ms is None else deadline_ms
        self.stats.calls += 1
        try:
            items = list(map(int, item_ids))
            user, t = int(user_id), int(event_time_ms)
        except Exception:  # not ids: nothing can be served, and the ranker must not fail
            log.exception("feature lookup got invalid ids; serving missing")
            self.stats.internal_errors += 1
            return self._empty(len(item_ids) if hasattr(item_ids, "__len__") else 0)
        out = self._empty(len(items))
        self.stats.lookups += len(items)
        late = False
        if items or history is not None:
            late = self._guarded_fill(user, items, t, budget, start, out, history)
        if late or (time.perf_counter() - start) * 1000.0 > budget:
            self.stats.timeouts += 1
        self.stats.tiers += np.bincount(out.tiers, minlength=len(Tier))
        return out

    def _empty(self, n: int) -> Lookup:
        return Lookup(
            np.zeros((n, self.config.dim), np.float32),
            np.full(n, Tier.MISSING, np.uint8),
            np.full(n, -1, np.int64),
        )

    def _guarded_fill(
        self,
        user: int,
        items: list[int],
        t: int,
        budget: float,
        start: float,
        out: Lookup,
        history: list[StoredHistory] | None = None,
    ) -> bool:
        """Run :meth:`_fill`; translate every failure into counted missing. True = deadline hit."""
        try:
            return self._fill(user, items, t, budget, start, out, history)
        except StoreTimeout:
            return True
        except StoreError as exc:
            self.stats.store_errors += 1
            log.warning("store read failed; serving missing", extra={"error": str(exc)})
        except Exception:  # the ranker must never fail a request on its features
            self.stats.internal_errors += 1
            log.exception("feature lookup failed; serving missing")
            out.vectors[:] = 0.0  # a half-filled row must not pass for a served value
            out.tiers[:] = Tier.MISSING
            out.ages_ms[:] = -1
            if history:
                history.clear()  # the read did not complete: say so, not "no history"
        return False

    def _fresh(
        self, present: np.ndarray | bool, times: np.ndarray, tags: np.ndarray, t: int, ttl: int
    ) -> np.ndarray:
        return fresh_mask(present, times, tags, t, ttl, self.config.version_tag)

    def _fill(
        self,
        user: int,
        items: list[int],
        t: int,
        budget: float,
        start: float,
        out: Lookup,
        history: list[StoredHistory] | None = None,
    ) -> bool:
        """Round 1 (own keys), then the neighbours' values if budget is left. True = deadline hit.

        A user whose last lookup read neighbours is likely to again (its aggregate is stale), so
        round 1 also fetches the keys that lookup's round 2 read. If the neighbour list read now
        names the same neighbours, round 1 already holds every value round 2 would read and it
        is skipped: same keys, same decoding, same values served, one round trip less.
        """
        cfg, n = self.config, len(items)
        hint = self._hints.get(user, ())
        hint_pairs = bool(hint) and len(hint) * n <= cfg.max_neighbour_pair_keys
        res = self.store.read(
            ReadBatch(
                pairs=PairGrid((user, *hint) if hint_pairs else (user,), items),
                aggregates=(user, *hint),
                neighbours=(user,),
                histories=(user,) if history is not None else (),
                states=(user,) if self.states is not None else (),
            ),
            timeout_ms=budget,
        )
        self.stats.round_trips += 1
        if history is not None:
            history.append(self._history(res.histories[0]))
        if not items:
            return False
        rest = self._fill_exact(res.pairs[:n] if hint_pairs else res.pairs, t, out)
        if not rest.any():
            return False
        if res.states and self._fill_state(res.states[0], items, rest, t, out):
            self._hints.pop(user, None)
            return False
        agg = self._fresh_one(res.aggregates[0], t, cfg.aggregate_ttl_ms)
        if agg is not None:
            out.vectors[rest] = agg.array()
            out.tiers[rest] = Tier.AGGREGATE
            out.ages_ms[rest] = t - agg.event_time_ms
            self._hints.pop(user, None)
            return False
        nb_ids, nb_weights = self._neighbours(user, items, res.neighbours[0], t)
        if nb_ids.size == 0:
            self._hints.pop(user, None)
            return False
        remaining = budget - (time.perf_counter() - start) * 1000.0
        if remaining <= 0:
            return True
        users = tuple(nb_ids.tolist())
        rest_idx = np.flatnonzero(rest)
        with_pairs = len(users) * len(rest_idx) <= cfg.max_neighbour_pair_keys
        if users == hint and (hint_pairs or not with_pairs):
            self.stats.hinted_neighbour_reads += 1
            cols = (np.arange(1, len(users) + 1)[:, None] * n + rest_idx).ravel().tolist()
            pairs = list(map(res.pairs.__getitem__, cols)) if with_pairs else []
            aggregates = res.aggregates[1:]
        else:
            rest_items = [items[j] for j in rest_idx]
            got = self.store.read(
                ReadBatch(
                    pairs=PairGrid(users, rest_items) if with_pairs else (), aggregates=users
                ),
                remaining,
            )
            self.stats.round_trips += 1
            pairs, aggregates = got.pairs, got.aggregates
        blend_neighbours(
            cfg, self.stats, t, nb_weights, rest_idx, with_pairs, pairs, aggregates, out
        )
        self._remember(user, users)
        return False

    def _fill_state(
        self, raw: bytes | None, items: list[int], rest: np.ndarray, t: int, out: Lookup
    ) -> bool:
        """Serve every candidate in ``rest`` the user's newest fresh state (of the two the key
        keeps, :mod:`store.state_slots`) decoded for it; True if it did. A state of another
        width or model, or a failed or non-finite decode, falls through to the next tier
        (counted: ``state_decode_errors``)."""
        decoder = self.states
        if raw is None or decoder is None:
            return False
        ttl = self.config.state_ttl_ms
        fresh = (self._fresh_one(v, t, ttl, decoder.width) for v in split_states(raw))
        state = next((s for s in fresh if s is not None), None)
        if state is None:
            return False
        idx = np.flatnonzero(rest)
        try:
            vectors, _ = decoder.decode(
                np.asarray(items, np.int64)[idx], np.tile(state.array(), (len(idx), 1))
            )
        except Exception:  # a model fault must not fail the request: the next tier serves
            self.stats.state_decode_errors += 1
            log.exception("state decode failed; serving the next tier")
            return False
        if vectors.shape != (len(idx), self.config.dim) or not np.isfinite(vectors).all():
            self.stats.state_decode_errors += 1
            return False
        out.vectors[idx] = vectors
        out.tiers[idx] = Tier.STATE
        out.ages_ms[idx] = t - state.event_time_ms
        return True

    def _remember(self, user: int, neighbours: tuple[int, ...]) -> None:
        if self.config.neighbour_hints <= 0:
            return
        self._hints[user] = neighbours
        self._hints.move_to_end(user)
        if len(self._hints) > self.config.neighbour_hints:
            self._hints.popitem(last=False)

    def _history(self, raw: bytes | None) -> StoredHistory:
        """The user's history; absent or corrupt (counted) reads as empty, a new user's."""
        if raw is None:
            return StoredHistory.empty()
        try:
            return decode_history(raw)
        except CorruptValue:
            self.stats.corrupt_values += 1
            return StoredHistory.empty()

    def _fresh_one(
        self, raw: bytes | None, t: int, ttl: int, dim: int | None = None
    ) -> StoredVector | None:
        """One value (the user's aggregate, or state of width ``dim``), if valid and fresh:
        :meth:`_fresh` and :func:`~store.batch_decode.decode_many`'s checks, without a
        batch's fixed costs."""
        if raw is None:
            return None
        try:
            value = decode_vector(raw)
        except CorruptValue:
            value = None
        if value is None or value.dim != (self.config.dim if dim is None else dim):
            self.stats.corrupt_values += 1
            return None
        tag = self.config.version_tag
        if tag is not None and value.version_tag != tag:
            return None
        if value.event_time_ms < t and t - value.event_time_ms <= ttl:
            return value
        return None

    def _fill_exact(self, values: list[bytes | None], t: int, out: Lookup) -> np.ndarray:
        """Serve the fresh pair values as exact; returns the mask of candidates still to fill."""
        rows = decode_rows(values, self.config.dim)
        self.stats.corrupt_values += rows.corrupt
        rest = np.ones(len(values), dtype=bool)
        if not len(rows.index):
            return rest
        fresh = self._fresh(True, rows.event_time_ms, rows.version_tag, t, self.config.pair_ttl_ms)
        if fresh.all():
            idx, vectors, times = rows.index, rows.vectors, rows.event_time_ms
        else:
            idx, vectors, times = rows.index[fresh], rows.vectors[fresh], rows.event_time_ms[fresh]
        out.vectors[idx] = vectors
        out.tiers[idx] = Tier.EXACT
        out.ages_ms[idx] = t - times
        rest[idx] = False
        return rest

    def _neighbours(
        self, user: int, items: list[int], raw: bytes | None, t: int
    ) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.config
        if raw is not None:
            try:
                nb = decode_neighbours(raw)
            except CorruptValue:
                self.stats.corrupt_values += 1
            else:
                if nb.event_time_ms < t and t - nb.event_time_ms <= cfg.neighbour_ttl_ms:
                    keep = nb.weights > 0
                    return nb.user_ids[keep][: cfg.max_neighbours], nb.weights[keep][
                        : cfg.max_neighbours
                    ]
        if self.cold_start is None:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        self.stats.cold_start_queries += 1
        ids, weights = self.cold_start.neighbours_for_items(items, cfg.max_neighbours, user)
        keep = weights > 0
        return ids[keep], weights[keep]
