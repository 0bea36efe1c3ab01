"""Interaction log → recorded traffic, with a documented, seeded, leakage-free retrieval simulation.

Real logs (MovieLens, Taobao) hold interactions, not ranking requests. The conversion:

1. **Requests.** A user's interactions are grouped in event-time order: a request opens at an
   interaction and takes the user's later interactions while they fall within ``session_gap_s``
   of the request's *first* one and it holds fewer than ``max_interacted`` distinct items; the
   next interaction opens a new request. The request's event time is its first interaction's
   time, so no label of a request is more than ``session_gap_s`` after the request. Hence a
   user's consecutive requests are more than ``session_gap_s`` apart (unless the cap split a
   burst): the gap share "within 1 min" of converted traffic is ~0 by construction.
2. **Impressions** = the request's interacted items only, one per distinct item, with the real
   label (the max over repeats, e.g. a Taobao ``pv`` then ``cart`` of one item is engaged).
   Retrieved items the user did not touch get **no** impression: their outcome is unknown (an
   unrated film is not a disliked one), so they are unlabelled candidates of the request.
   Except for *implicit feedback* (a log with no negatives, e.g. a click log read without a
   label column): there ``implicit_negatives`` (:func:`config_for`: 4 by default) retrieved
   candidates the user did not interact with get an impression labelled 0, the way a ranker
   sees a shown-but-not-clicked item; they are the first ones of the shuffled list, so a
   seeded random draw.
3. **Candidates** (up to ``k``) = the interacted items, then retrieved items that are neither
   interacted in this request nor among the user's recent items: up to a ``covisit_share`` of
   the free slots from co-visitation neighbours of the user's recent items, an
   ``explore_share`` drawn at random (seeded, weighted by popularity, without replacement) from
   the popular pool, and the rest the top of the time-decayed popular pool (recomputed every
   ``popular_refresh_s`` of event time); when a source runs short the others top up. The list
   is then shuffled, so a position (the impression's ``position`` = index in the candidate
   list) says nothing about whether an item was interacted.
4. **No leakage.** Retrieval state (co-visitation counts, user histories, popularity) is fed
   only interactions with ``ts < t`` before the request at ``t`` is built; the request's own
   interacted items are the only thing it knows from ``[t, t + session_gap_s]``. Randomness is
   drawn from a generator seeded by ``(seed, user_id, the user's request number)``, and request ids
   are ``{dataset}-{user_id}-{n}``, so changing anything after ``t`` (except the request's own
   interactions) leaves the request at ``t`` unchanged — a unit test checks exactly that.

Cost: one pass; O(window) co-visitation updates per interaction with bounded neighbour lists, and
O(recent × max_neighbours + popular_pool) per request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from models.data.columns import Impressions, Requests
from models.data.errors import ConfigError
from models.data.loaders import Interactions
from models.data.retrieval import CovisitIndex, PopularityIndex, half_life_ms

logger = logging.getLogger(__name__)
_PROGRESS_EVERY = 1000


@dataclass(frozen=True, slots=True)
class ConvertConfig:
    """Knobs of the conversion; ``session_gap_s`` = 60 s and ``k`` = 50 as in SOLARIS.md §7."""

    session_gap_s: float = 60.0
    """Interactions within this many seconds of a request's first one join it."""
    k: int = 50
    """Candidates per request (the ranker's final-stage list size)."""
    max_interacted: int | None = None
    """Most distinct interacted items per request (default ``k // 2``), so at least
    ``k - max_interacted`` slots are retrieved; a longer burst (MovieLens bulk rating)
    continues in the next request."""
    covisit_share: float = 0.6
    """Share of free slots filled by co-visitation neighbours before popular items."""
    explore_share: float = 0.1
    """Share of free slots drawn at random (seeded) from the popular pool, weighted by
    popularity: the exploration slice of a retrieval stage; the rest of the popular slots are
    the top trending items."""
    covisit_window: int = 5
    """An interaction co-visits with the user's previous ``covisit_window`` items."""
    recent_items: int = 10
    """The user's last distinct items used as co-visitation seeds (and excluded from retrieval)."""
    recency_decay: float = 0.8
    """Weight of the r-th most recent seed item is ``recency_decay ** r``."""
    max_neighbours: int = 50
    """Neighbour list bound per item (pruned to this size when it doubles)."""
    popular_pool: int = 200
    """Popular items sampled from: the top of the decayed-popularity ranking."""
    popularity_half_life_days: float = 7.0
    """Half-life of popularity counts (trending rather than all-time popular)."""
    popular_refresh_s: float = 600.0
    """The popular pool is recomputed at most every this many seconds of event time, like a
    periodic trending job (and not after every event, which would make the tail of a sparse
    log's popularity ranking reshuffle between a user's consecutive requests)."""
    seed: int = 0
    """Seeds each request's generator together with (user_id, request number)."""
    implicit_negatives: int = 0
    """Per request, up to this many retrieved candidates the user did not interact with get an
    impression labelled 0 (implicit feedback: a log without negatives); 0 = none."""

    def __post_init__(self) -> None:
        checks = {
            "session_gap_s": self.session_gap_s >= 0,
            "k": self.k >= 1,
            "max_interacted": 1 <= self.interacted_cap <= self.k,
            "covisit_share": 0.0 <= self.covisit_share <= 1.0,
            "explore_share": 0.0 <= self.explore_share <= 1.0 - self.covisit_share,
            "covisit_window": self.covisit_window >= 1,
            "recent_items": self.recent_items >= 1,
            "recency_decay": 0.0 < self.recency_decay <= 1.0,
            "max_neighbours": self.max_neighbours >= 1,
            "popular_pool": self.popular_pool >= 1,
            "popularity_half_life_days": self.popularity_half_life_days > 0,
            "popular_refresh_s": self.popular_refresh_s > 0,
            "seed": self.seed >= 0,
            "implicit_negatives": 0 <= self.implicit_negatives <= self.k,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ConfigError(f"ConvertConfig: invalid {', '.join(bad)} in {self}")

    @property
    def interacted_cap(self) -> int:
        """The effective ``max_interacted``."""
        return self.max_interacted if self.max_interacted is not None else max(self.k // 2, 1)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _Pending:
    """A request being grouped: its user, start, and interacted items (item -> label)."""

    user: int
    start_ms: int
    number: int
    items: dict[int, int]


def group_requests(log: Interactions, config: ConvertConfig) -> list[_Pending]:
    """Step 1: group interactions into requests, in start-time order (ties: log order)."""
    gap_ms = round(config.session_gap_s * 1000)
    open_req: dict[int, _Pending] = {}
    count: dict[int, int] = {}
    out: list[_Pending] = []
    for user, item, ts, label in zip(
        log.user_id.tolist(),
        log.item_id.tolist(),
        log.ts_ms.tolist(),
        log.label.tolist(),
        strict=True,
    ):
        req = open_req.get(user)
        if (
            req is not None
            and ts - req.start_ms <= gap_ms
            and (item in req.items or len(req.items) < config.interacted_cap)
        ):
            req.items[item] = max(req.items.get(item, 0), label)
            continue
        number = count.get(user, 0)
        count[user] = number + 1
        req = _Pending(user, ts, number, {item: label})
        open_req[user] = req
        out.append(req)
    return out


def _retrieve(
    req: _Pending,
    config: ConvertConfig,
    covisit: CovisitIndex,
    popular: PopularityIndex,
) -> list[int]:
    """Step 3: the request's candidate list (shuffled), from state known before its time."""
    rng = np.random.default_rng([config.seed, req.user, req.number])
    interacted = list(req.items)
    exclude = set(interacted) | set(covisit.recent_items(req.user))
    free = config.k - len(interacted)
    n_cov = round(free * config.covisit_share)
    n_explore = round(free * config.explore_share)
    cov = covisit.retrieve(req.user, free, exclude)  # every free slot: leftovers top up below
    chosen = cov[:n_cov]
    exclude.update(chosen)
    top = popular.top(free, exclude)
    n_top = max(free - len(chosen) - n_explore, 0)  # popular items fill what co-visitation can't
    chosen += top[:n_top]
    exclude.update(chosen)
    chosen += popular.sample(min(n_explore, free - len(chosen)), exclude, rng)
    for extra in (top[n_top:], cov[n_cov:]):  # a source ran short: top up from the others
        if len(chosen) < free:
            taken = set(chosen)
            chosen += [item for item in extra if item not in taken][: free - len(chosen)]
    candidates = interacted + chosen
    rng.shuffle(candidates)
    return candidates


IMPLICIT_NEGATIVES = 4
"""Negatives per request :func:`config_for` gives a log without any (see the module doc)."""


def config_for(log: Interactions, **knobs: Any) -> ConvertConfig:
    """``ConvertConfig(**knobs)``, with implicit negatives when ``log`` has no negative label
    (every row a positive: implicit feedback), logged, so a click log trains on a task with
    two classes instead of failing (or, before, reporting garbage)."""
    if len(log) and int(log.label.min()) == 1 and "implicit_negatives" not in knobs:
        knobs["implicit_negatives"] = IMPLICIT_NEGATIVES
        logger.warning(
            "the log has no negative labels (implicit feedback): each request gets up to %d "
            "retrieved candidates the user did not interact with, labelled 0",
            IMPLICIT_NEGATIVES,
            extra={"op": "implicit_negatives", "per_request": IMPLICIT_NEGATIVES},
        )
    return ConvertConfig(**knobs)


def convert(
    log: Interactions,
    config: ConvertConfig | None = None,
    dataset: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Requests, Impressions]:
    """Convert an interaction log into :class:`Requests` + :class:`Impressions` (event order).

    ``dataset`` prefixes request ids (default: the log's name). ``progress(done, total)`` is
    called every few hundred requests. Deterministic: the same log and config give identical
    output.
    """
    cfg = config or ConvertConfig()
    prefix = dataset or log.name
    started = time.perf_counter()
    pending = group_requests(log, cfg)
    covisit = CovisitIndex(
        cfg.covisit_window, cfg.recent_items, cfg.max_neighbours, cfg.recency_decay
    )
    popular = PopularityIndex(
        np.unique(log.item_id),
        half_life_ms(cfg.popularity_half_life_days),
        cfg.popular_pool,
        max(round(cfg.popular_refresh_s * 1000), 1),
    )
    users, items, times = log.user_id.tolist(), log.item_id.tolist(), log.ts_ms.tolist()
    fed = 0
    rid: list[str] = []
    ruser: list[int] = []
    rtime: list[int] = []
    cands: list[list[int]] = []
    imp_req: list[int] = []
    imp_item: list[int] = []
    imp_pos: list[int] = []
    imp_label: list[int] = []
    for r, req in enumerate(pending):
        while fed < len(times) and times[fed] < req.start_ms:  # strictly before t: no leakage
            covisit.add(users[fed], items[fed])
            popular.add(items[fed], times[fed])
            fed += 1
        popular.refresh_if_due(req.start_ms)
        candidates = _retrieve(req, cfg, covisit, popular)
        rid.append(f"{prefix}-{req.user}-{req.number}")
        ruser.append(req.user)
        rtime.append(req.start_ms)
        cands.append(candidates)
        position = {item: pos for pos, item in enumerate(candidates)}
        shown = list(req.items.items())
        if cfg.implicit_negatives:
            unclicked = [c for c in candidates if c not in req.items]
            shown += [(c, 0) for c in unclicked[: cfg.implicit_negatives]]
        for item, label in shown:
            imp_req.append(r)
            imp_item.append(item)
            imp_pos.append(position[item])
            imp_label.append(label)
        if progress is not None and (r + 1) % _PROGRESS_EVERY == 0:
            progress(r + 1, len(pending))
    if progress is not None:
        progress(len(pending), len(pending))
    requests = Requests.from_lists(rid, ruser, rtime, cands)
    impressions = Impressions.from_lists(imp_req, requests, imp_item, imp_pos, imp_label)
    logger.info(
        "converted %d interactions into %d requests in %.1f s",
        len(log),
        len(requests),
        time.perf_counter() - started,
        extra={
            "op": "traffic_converted",
            "dataset": prefix,
            "interactions": len(log),
            "requests": len(requests),
            "impressions": len(impressions),
        },
    )
    return requests, impressions


def conversion_metadata(log: Interactions, config: ConvertConfig, dataset: str) -> dict[str, Any]:
    """File metadata describing a conversion (stored in the traffic file)."""
    return {
        "dataset": dataset,
        "source": "convert",
        "interactions": len(log),
        "converter": config.as_dict(),
        "seed": config.seed,
    }
