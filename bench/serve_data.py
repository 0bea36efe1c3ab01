"""The serving benchmark's world: users with a realistic tier mix, and the two comparison readers.

Tier mix. One request's lookup can only mix exact with *one* fallback tier (the reader serves every
non-exact candidate from the user's aggregate when it is fresh, else from neighbours), so the mix
comes from three kinds of users, drawn per call with fixed weights:

=========  ======  =====================================================  =====================
profile    weight  stored                                                 tiers served
=========  ======  =====================================================  =====================
active     0.65    45 % of candidates as pairs, a fresh aggregate         exact + aggregate
lapsed     0.15    40 % as pairs, a stale aggregate, a fresh neighbour    exact + neighbours
                   list (8 users with fresh aggregates and 30 % of the    (2 round trips)
                   other candidates as pairs)
new        0.20    25 % as pairs, nothing else                            exact + missing
=========  ======  =====================================================  =====================

Overall ≈ 40 % exact, 36 % aggregate, 9 % neighbours, 15 % missing: the mix the VMs train on
(``TrainConfig.tier_rates`` = 0.40 / 0.35 / 0.10 / 0.15, from the SOLARIS paper's 40–50 % exact
and 85–90 % with aggregates). The benchmark reports the mix it actually served.

Comparison readers: :class:`RecordingStore` captures the keys each lookup fetches (so the floor
can fetch exactly those keys, in one pipelined round trip, without decoding), and
:class:`NaiveReader` does what a straightforward client would: one ``GET`` per key, one decode per
value into float32, the same tier rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import redis

from schemas.records import NeighbourList, PairEmbedding, UserAggregate
from store.errors import CorruptValue
from store.keys import KeyLayout
from store.protocol import FeatureStore, ReadBatch, ReadResult
from store.reader import ReaderConfig
from store.redis_store import RedisStore
from store.tiers import Tier
from store.values import decode_neighbours, decode_vector

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
#: Request event time of every call (values are written relative to it).
REQUEST_T = 1_704_153_600_000
MODEL_VERSION = "bench-fm"


@dataclass(frozen=True, slots=True)
class Profile:
    """A kind of user: share of calls, share of candidates stored as pairs, fallbacks stored."""

    name: str
    weight: float
    exact_share: float
    aggregate: str  #: "fresh", "stale" or "none"
    neighbours: bool


PROFILES: tuple[Profile, ...] = (
    Profile("active", 0.65, 0.45, "fresh", False),
    Profile("lapsed", 0.15, 0.40, "stale", True),
    Profile("new", 0.20, 0.25, "none", False),
)
NEIGHBOURS_PER_USER = 8
NEIGHBOUR_PAIR_SHARE = 0.30


@dataclass(frozen=True, slots=True)
class BenchUser:
    """One stored user: its profile and its candidate list (the first n are a request of size n)."""

    user_id: int
    profile: Profile
    candidates: tuple[int, ...]


def _vec(rng: np.random.Generator, dim: int) -> np.ndarray:
    return rng.normal(0.0, 0.3, dim).astype(np.float32)


def _pair(rng: np.random.Generator, dim: int, user: int, item: int, t: int) -> PairEmbedding:
    return PairEmbedding.from_array(user, item, t, MODEL_VERSION, _vec(rng, dim))


def _agg(rng: np.random.Generator, dim: int, user: int, t: int) -> UserAggregate:
    return UserAggregate.from_array(user, t, 24 * HOUR_MS, 30, MODEL_VERSION, _vec(rng, dim))


def populate(
    store: RedisStore,
    dim: int,
    users_per_profile: int,
    max_candidates: int,
    seed: int = 7,
    ttl_ms: int = 30 * MINUTE_MS,
) -> list[BenchUser]:
    """Write the benchmark users' pairs, aggregates and neighbour lists; returns the users.

    Ids are 6–7 digits (realistic key lengths). Physical TTL ``ttl_ms`` is wall time, only a
    safety net: the benchmark deletes its keys when it ends.
    """
    rng = np.random.default_rng(seed)
    t = REQUEST_T
    pool = [int(u) for u in rng.choice(np.arange(100_000, 999_999), 200, replace=False)]
    neighbour_pool, pool = pool[:12], pool[12:]
    users: list[BenchUser] = []
    pairs: list[PairEmbedding] = []
    aggs: list[UserAggregate] = []
    lists: list[NeighbourList] = []
    for nb in neighbour_pool:
        aggs.append(_agg(rng, dim, nb, t - 20 * MINUTE_MS))
    for profile in PROFILES:
        for _ in range(users_per_profile):
            user = pool.pop()
            items = rng.choice(np.arange(1_000_000, 9_999_999), max_candidates, replace=False)
            cands = tuple(int(i) for i in items)
            users.append(BenchUser(user, profile, cands))
            stored = rng.random(max_candidates) < profile.exact_share
            ages = rng.integers(MINUTE_MS, 3 * HOUR_MS, max_candidates)
            for item, keep, age in zip(cands, stored, ages, strict=True):
                if keep:
                    pairs.append(_pair(rng, dim, user, item, t - int(age)))
            if profile.aggregate != "none":
                age = 10 * MINUTE_MS if profile.aggregate == "fresh" else 30 * HOUR_MS
                aggs.append(_agg(rng, dim, user, t - age))
            if profile.neighbours:
                nbs = rng.choice(neighbour_pool, NEIGHBOURS_PER_USER, replace=False)
                weights = np.sort(rng.uniform(0.2, 0.9, NEIGHBOURS_PER_USER))[::-1]
                lists.append(
                    NeighbourList(
                        user,
                        t - HOUR_MS,
                        tuple(int(n) for n in nbs),
                        tuple(float(w) for w in weights),
                    )
                )
                for item, keep in zip(cands, stored, strict=True):
                    if keep:
                        continue
                    for nb in nbs:
                        if rng.random() < NEIGHBOUR_PAIR_SHARE:
                            pairs.append(_pair(rng, dim, int(nb), item, t - 2 * HOUR_MS))
    for start in range(0, len(pairs), 5_000):
        store.write_pairs(pairs[start : start + 5_000], ttl_ms)
    store.write_aggregates(aggs, ttl_ms)
    store.write_neighbours(lists, ttl_ms)
    return users


class RecordingStore:
    """Delegates to a :class:`RedisStore` and records the keys of every read (one list per read)."""

    def __init__(self, inner: RedisStore) -> None:
        self.inner = inner
        self.reads: list[list[bytes]] = []

    def read(self, batch: ReadBatch, timeout_ms: float) -> ReadResult:
        self.reads.append(self.inner.keys_for(batch))
        return self.inner.read(batch, timeout_ms)

    def __getattr__(self, name: str) -> object:  # the rest of the FeatureStore protocol
        return getattr(self.inner, name)


def as_feature_store(store: RecordingStore) -> FeatureStore:
    """Typed view of a :class:`RecordingStore` (it forwards the protocol's other methods)."""
    return store  # type: ignore[return-value]


class NaiveReader:
    """The same tiers as :class:`store.reader.FeatureReader`, the straightforward way.

    One blocking ``GET`` per key (so one round trip per key) and one Python decode per value
    into float32. It exists only as the benchmark's baseline; it shares the reader's freshness
    rules so both serve the same tiers (the benchmark checks that they do).
    """

    def __init__(self, client: redis.Redis, layout: KeyLayout, config: ReaderConfig) -> None:
        self.client = client
        self.layout = layout
        self.config = config

    def _vector(self, key: bytes, t: int, ttl: int) -> tuple[np.ndarray, int] | None:
        raw = self.client.get(key)
        if not isinstance(raw, bytes):
            return None
        try:
            value = decode_vector(raw)
        except CorruptValue:
            return None
        if not (value.event_time_ms < t and t - value.event_time_ms <= ttl):
            return None
        tag = self.config.version_tag
        if tag is not None and value.version_tag != tag:
            return None
        return value.array(), value.event_time_ms

    def lookup(self, user: int, items: Sequence[int], t: int) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors float32 [n, dim], tiers uint8 [n])`` for one request."""
        cfg, lay = self.config, self.layout
        n = len(items)
        vectors = np.zeros((n, cfg.dim), np.float32)
        tiers = np.full(n, Tier.MISSING, np.uint8)
        rest: list[int] = []
        for j, item in enumerate(items):
            got = self._vector(lay.pair(user, item), t, cfg.pair_ttl_ms)
            if got is None:
                rest.append(j)
            else:
                vectors[j], tiers[j] = got[0], Tier.EXACT
        if not rest:
            return vectors, tiers
        agg = self._vector(lay.aggregate(user), t, cfg.aggregate_ttl_ms)
        if agg is not None:
            vectors[rest], tiers[rest] = agg[0], Tier.AGGREGATE
            return vectors, tiers
        raw = self.client.get(lay.neighbours(user))
        if not isinstance(raw, bytes):
            return vectors, tiers
        nb = decode_neighbours(raw)
        if not (nb.event_time_ms < t and t - nb.event_time_ms <= cfg.neighbour_ttl_ms):
            return vectors, tiers
        keep = nb.weights > 0
        ids, weights = (
            nb.user_ids[keep][: cfg.max_neighbours],
            nb.weights[keep][: cfg.max_neighbours],
        )
        with_pairs = len(ids) * len(rest) <= cfg.max_neighbour_pair_keys
        left: list[int] = []
        for j in rest:
            acc, den = np.zeros(cfg.dim, np.float32), 0.0
            if with_pairs:
                for u, w in zip(ids, weights, strict=True):
                    got = self._vector(lay.pair(int(u), items[j]), t, cfg.pair_ttl_ms)
                    if got is not None:
                        acc += w * got[0]
                        den += float(w)
            if den > 0:
                vectors[j], tiers[j] = acc / den, Tier.NEIGHBOUR_ITEM
            else:
                left.append(j)
        if left:
            acc, den = np.zeros(cfg.dim, np.float32), 0.0
            for u, w in zip(ids, weights, strict=True):
                got = self._vector(lay.aggregate(int(u)), t, cfg.neighbour_aggregate_ttl_ms)
                if got is not None:
                    acc += w * got[0]
                    den += float(w)
            if den > 0:
                vectors[left], tiers[left] = acc / den, Tier.NEIGHBOUR_AGGREGATE
        return vectors, tiers
