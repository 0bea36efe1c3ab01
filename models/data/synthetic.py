"""Seeded synthetic ads-like traffic: a latent-factor world with sessions, retrieval and clicks.

Lets a fresh machine without datasets run the demo and the tests. The traffic's shape
(sessions, gaps, candidate overlap, label rate) is calibrated to published ads-traffic
statistics, **not** tuned to flatter SOLARIS (each knob says where its value comes from);
``test_synthetic`` measures the resulting statistics and checks the bands. One part is *chosen*
instead: the pair memory below, which is what gives the FM something to transfer.

The world:

* **Items** have latent vectors, a Zipf popularity (used by retrieval) and a click bias.
* **Users** have a long-term taste vector that drifts slowly (an Ornstein–Uhlenbeck process in
  event time) and heterogeneous activity (log-normal session rates). Each session adds a
  short-term intent offset to the taste: what the user is after right now.
* **Sessions** start as a diurnal Poisson process per user over ``days``; a session is a burst
  of requests (geometric count, log-normal gaps) — so users return over many days, and most
  consecutive requests of a user are seconds to minutes apart.
* **Retrieval**: the top-``k`` items by taste·item + popularity prior + Gumbel noise (softmax
  sampling without replacement at a temperature), so consecutive requests of a user share part
  of their candidates.
* **Ranking and clicks**: a noisy ranker shows its top ``shown`` candidates; each shown item is
  clicked with probability sigmoid(intercept + taste·item + item bias − position bias + pair
  memory + noise), the intercept solved so the overall label rate is ``label_rate``.
* **Pair memory** (re-engagement and wear-out): a click on an item raises the user's click
  logit for that same item on later exposures by ``reclick_weight``, and an exposure without a
  click lowers it by ``fatigue_weight``; both decay over hours (``reclick_hours``,
  ``fatigue_hours``). Users come back to what they just engaged with (repeat consumption, the
  premise of retargeting) and tire of what they keep skipping (ad wear-out).

**What the FM can see that the VM cannot.** The pair memory lives in the user's own recent
exposures of the target item and their labels: the FM's input (last ``L`` labelled impressions
with time gaps; its target attention matches the target against them). User and item ids (the
VM, trained on an earlier period) cannot hold it, because it changes within hours: the same user
and item click at very different rates depending on the last few hours. Consecutive requests of
a user share about half their candidates, so ~40 % of impressions re-show an item from the
user's last 20 impressions. The memory lasts hours, so it survives the minutes-to-hours
staleness of a precomputed embedding. A slower memory (12 h) helped the VM nearly as much as
the FM (gap 0.017 NE in a 3-seed probe; probably pairs still hot at the end of the VM's period
stay hot into the test period). Measured with ``solaris evaluate --dataset synthetic``
(3 seeds): FM NE 0.953 vs VM 0.960 without the memory, 0.865 vs 0.937 with it
(ml-latest-small's gap is ~0.06). Session-level *category* interests, tried first, were
learned by neither model: at ~15 impressions per item, a week of traffic cannot place 5,000
items into categories. Both weights 0 reproduce the memoryless world bit for bit.

Output conventions: user ids ``1..n_users`` and item ids ``1..n_items`` (0 is never used);
request ids ``syn-{user_id}-{n}`` (the user's n-th request); a request's candidates are in
retrieval order (best first); an impression's ``position`` is its display slot
``0..shown-1`` in the ranker's order; every request has exactly ``shown`` impressions.

Example::

    traffic = generate(SyntheticConfig(n_users=200, days=3))
    write_traffic(path, iter_events(traffic.requests, traffic.impressions),
                  synthetic_metadata(SyntheticConfig(n_users=200, days=3)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.data.columns import Impressions, Requests
from models.data.pair_memory import PairMemory, clicks_at_rate
from models.data.synthetic_config import SyntheticConfig

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class SyntheticTraffic:
    """Generated traffic plus the ground truth a test or an oracle baseline may want.

    ``click_prob`` float64[m]: the true click probability of each impression (aligned with
    ``impressions``); ``session`` int64[n]: the session index of each request.
    """

    requests: Requests
    impressions: Impressions
    click_prob: np.ndarray
    session: np.ndarray


def _sessions(cfg: SyntheticConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Session (user, start seconds) pairs: a thinned (diurnal) Poisson process per user."""
    rate = cfg.sessions_per_day * rng.lognormal(
        -(cfg.activity_sigma**2) / 2, cfg.activity_sigma, cfg.n_users
    )
    proposals = rng.poisson(rate * cfg.days * (1 + cfg.diurnal_amplitude))
    users = np.repeat(np.arange(1, cfg.n_users + 1, dtype=np.int64), proposals)
    start = rng.uniform(0.0, cfg.days * DAY_S, users.shape[0])
    hour = (start / 3600.0) % 24.0
    accept = 1 + cfg.diurnal_amplitude * np.cos(2 * np.pi * (hour - cfg.peak_hour) / 24.0)
    keep = rng.uniform(0.0, 1 + cfg.diurnal_amplitude, users.shape[0]) < accept
    return users[keep], start[keep]


def _requests(
    cfg: SyntheticConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user, time ms, session index) per request, sorted by time (ties: user, session)."""
    s_user, s_start = _sessions(cfg, rng)
    count = rng.geometric(1.0 / cfg.requests_per_session, s_user.shape[0])
    session = np.repeat(np.arange(s_user.shape[0], dtype=np.int64), count)
    gaps = rng.lognormal(np.log(cfg.gap_median_s), cfg.gap_sigma, session.shape[0])
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    gaps[first] = 0.0  # the first request of a session is at its start
    csum = np.cumsum(gaps)
    offset = csum - np.repeat(csum[first], count)
    t_ms = cfg.start_ms + np.round((s_start[session] + offset) * 1000).astype(np.int64)
    users = s_user[session]
    order = np.lexsort((session, users, t_ms))
    return users[order], t_ms[order], session[order]


def _tastes(
    cfg: SyntheticConfig,
    rng: np.random.Generator,
    users: np.ndarray,
    t_ms: np.ndarray,
    session: np.ndarray,
    n_sessions: int,
) -> np.ndarray:
    """Effective taste per request: drifting long-term taste + the session's intent, [n, dim]."""
    scale = cfg.dim**-0.25  # u·v of two such vectors has unit variance
    n = users.shape[0]
    taste = np.empty((n, cfg.dim))
    by_user = np.lexsort((t_ms, users))
    u_sorted = users[by_user]
    new_user = np.concatenate([[True], u_sorted[1:] != u_sorted[:-1]])
    dt_days = np.diff(t_ms[by_user], prepend=t_ms[by_user][0]) / (DAY_S * 1000)
    rho = np.where(new_user, 0.0, np.exp(-dt_days / cfg.drift_days))
    noise = rng.normal(0.0, scale, (n, cfg.dim))
    state = np.zeros(cfg.dim)
    for j in range(n):  # Ornstein–Uhlenbeck step per request, stationary N(0, scale²)
        state = rho[j] * state + np.sqrt(1.0 - rho[j] ** 2) * noise[j]
        taste[by_user[j]] = state
    intent = rng.normal(0.0, scale * cfg.intent_scale, (n_sessions, cfg.dim))
    return taste + intent[session]


def _retrieve(
    cfg: SyntheticConfig,
    rng: np.random.Generator,
    taste: np.ndarray,
    session: np.ndarray,
    items: np.ndarray,
    log_pop: np.ndarray,
) -> np.ndarray:
    """Top-k item indices per request (best first), [n, k]: Gumbel-top-k over a pool.

    The noiseless score (taste·item + popularity prior) and the pool (its best
    ``retrieval_pool`` items) are computed once per session from the taste at the session's
    first request: taste drift within a session (minutes, against a drift time of weeks) is
    negligible. Each request then draws its own Gumbel noise over the pool.
    """
    pool = min(cfg.retrieval_pool, cfg.n_items)
    first = np.unique(session, return_index=True)[1]  # first request of each session
    n_sessions = first.shape[0]
    pools = np.empty((n_sessions, pool), dtype=np.int64)
    pool_score = np.empty((n_sessions, pool), dtype=np.float32)
    items32 = items.astype(np.float32)
    prior32 = (cfg.popularity_weight * log_pop).astype(np.float32)
    for lo in range(0, n_sessions, 1024):
        score = taste[first[lo : lo + 1024]].astype(np.float32) @ items32.T + prior32
        best = np.argpartition(-score, pool - 1, axis=1)[:, :pool]
        pools[lo : lo + 1024] = best
        pool_score[lo : lo + 1024] = np.take_along_axis(score, best, axis=1)
    out = np.empty((taste.shape[0], cfg.k), dtype=np.int64)
    for lo in range(0, taste.shape[0], 4096):
        sess = session[lo : lo + 4096]
        noisy = pool_score[sess] + cfg.retrieval_temperature * rng.gumbel(
            size=(sess.shape[0], pool)
        ).astype(np.float32)
        top = np.argpartition(-noisy, cfg.k - 1, axis=1)[:, : cfg.k]
        top_noisy = np.take_along_axis(noisy, top, axis=1)
        top = np.take_along_axis(top, np.argsort(-top_noisy, axis=1, kind="stable"), axis=1)
        out[lo : lo + 4096] = np.take_along_axis(pools[sess], top, axis=1)
    return out


def _solve_intercept(logit: np.ndarray, target: float) -> float:
    """The intercept b with mean(sigmoid(b + logit)) == target (bisection; monotone in b)."""
    lo, hi = -30.0, 30.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(np.mean(1.0 / (1.0 + np.exp(-(mid + logit))))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def generate(cfg: SyntheticConfig | None = None) -> SyntheticTraffic:
    """Generate traffic; pure function of ``cfg`` (same config → identical arrays)."""
    cfg = cfg or SyntheticConfig()
    world_rng, time_rng, taste_rng, retr_rng, click_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(5)
    )
    scale = cfg.dim**-0.25
    items = world_rng.normal(0.0, scale, (cfg.n_items, cfg.dim))
    rank = world_rng.permutation(cfg.n_items) + 1
    log_pop = -cfg.zipf_exponent * np.log(rank)
    item_bias = world_rng.normal(0.0, cfg.item_bias_sigma, cfg.n_items)

    users, t_ms, session = _requests(cfg, time_rng)
    n_sessions = int(session.max()) + 1 if session.size else 0
    taste = _tastes(cfg, taste_rng, users, t_ms, session, n_sessions)
    cand = _retrieve(cfg, retr_rng, taste, session, items, log_pop)

    affinity = np.einsum("nd,nkd->nk", taste, items[cand])
    relevance = cfg.affinity_weight * affinity + item_bias[cand]
    ranked = relevance + click_rng.normal(0.0, cfg.ranker_noise_sigma, relevance.shape)
    shown = np.argsort(-ranked, axis=1, kind="stable")[:, : cfg.shown]  # slots in cand
    position = np.broadcast_to(np.arange(cfg.shown, dtype=np.int32), shown.shape)
    logit = (
        np.take_along_axis(relevance, shown, axis=1)
        - cfg.position_decay * np.log1p(position)
        + click_rng.normal(0.0, cfg.click_noise_sigma, shown.shape)
    )
    memory = PairMemory(
        cfg.reclick_weight, cfg.reclick_hours, cfg.fatigue_weight, cfg.fatigue_hours
    )
    prob, label = clicks_at_rate(
        memory,
        logit,
        click_rng.random(logit.shape),
        users,
        t_ms,
        np.take_along_axis(cand, shown, axis=1),
        cfg.label_rate,
        _solve_intercept(logit, cfg.label_rate),
    )

    n = users.shape[0]
    numbers = _request_numbers(users)
    request_id = np.empty(n, dtype=object)
    request_id[:] = [f"syn-{u}-{k}" for u, k in zip(users.tolist(), numbers.tolist(), strict=True)]
    item_ids = cand + 1  # ids start at 1
    requests = Requests(
        request_id,
        users,
        t_ms,
        np.arange(0, n * cfg.k + 1, cfg.k, dtype=np.int64),
        item_ids.reshape(-1).astype(np.int64),
    )
    req_index = np.repeat(np.arange(n, dtype=np.int64), cfg.shown)
    impressions = Impressions(
        req_index,
        request_id[req_index],
        users[req_index],
        np.take_along_axis(item_ids, shown, axis=1).reshape(-1).astype(np.int64),
        t_ms[req_index],
        np.ascontiguousarray(position).reshape(-1).astype(np.int32),
        label.reshape(-1),
    )
    return SyntheticTraffic(requests, impressions, prob.reshape(-1), session)


def _request_numbers(users: np.ndarray) -> np.ndarray:
    """0-based index of each request among its user's requests (input is time-ordered)."""
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_users[1:] != sorted_users[:-1]]))
    counts = np.diff(np.append(starts, users.shape[0]))
    within = np.arange(users.shape[0]) - np.repeat(starts, counts)
    out = np.empty_like(users)
    out[order] = within
    return out


def synthetic_metadata(cfg: SyntheticConfig) -> dict[str, Any]:
    """File metadata describing a generated traffic file."""
    return {
        "dataset": "synthetic",
        "source": "generator",
        "generator": cfg.as_dict(),
        "seed": cfg.seed,
    }
