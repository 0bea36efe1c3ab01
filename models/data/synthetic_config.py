"""Knobs of the synthetic traffic generator (see :mod:`models.data.synthetic`), validated."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from models.data.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """Sizes and calibrated knobs of the synthetic world (all times in event time)."""

    seed: int = 0
    n_users: int = 600
    """Small default: ~33k requests over a week, replays in a few minutes on 2 cores. (Few
    users, each as active as a daily user of a large app — see ``sessions_per_day``.)"""
    n_items: int = 5_000
    dim: int = 16
    """Latent dimension of tastes and items."""
    days: float = 7.0
    """Span of the traffic: a week, so users return over several days and 24 h windows fill."""
    start_ms: int = 1_704_067_200_000
    """2024-01-01T00:00:00Z; fixed so files are reproducible."""
    sessions_per_day: float = 2.0
    """Mean sessions per user per day. Calibrated to the stickiness of a large ads-funded app:
    Meta reports Facebook's daily actives at ~2/3 of its monthly actives (DAU/MAU ≈ 0.66–0.69
    in its 2022–2024 quarterly reports); with the log-normal activity spread below, 2.0 gives
    DAU/MAU ≈ 0.67 over 30 days (``test_synthetic`` measures it). (Until 2026-11 this was 0.35,
    chosen for size, not calibrated: DAU/MAU 0.26, and 15 % of requests had no request of their
    user in the previous 24 h, against ~4 % now.)"""
    activity_sigma: float = 1.0
    """Log-normal spread of per-user session rates: user activity in online services is
    heavy-tailed (a few heavy users, many light ones)."""
    diurnal_amplitude: float = 0.5
    """Session starts follow a daily cycle (intensity ∝ 1 + A·cos(2π(h − peak)/24))."""
    peak_hour: float = 20.0
    """Evening peak of the daily cycle (UTC hour)."""
    requests_per_session: float = 3.7
    """Mean of the geometric request count per session. Calibrated with the gap law below to
    Meta's ERCache measurement (ERCache paper, 2024; quoted in SOLARIS.md §2): ~52 % of a user's
    consecutive requests within 1 min and ~76 % within 10 min. 1 − 1/3.7 ≈ 73 % of gaps are
    within a session; close-together sessions of heavy users add ~3 points below 10 min."""
    gap_median_s: float = 33.0
    """Median within-session gap between requests (log-normal)."""
    gap_sigma: float = 1.25
    """Log-normal sigma of within-session gaps: with the median, P(gap <= 1 min) ≈ 0.68 and
    P(gap <= 10 min) ≈ 0.99 inside a session, i.e. ≈ 0.52 and ≈ 0.76 over all gaps (ERCache);
    ``test_synthetic`` measures both on generated traffic."""
    k: int = 50
    """Candidates per request: final-stage ranking lists are tens to hundreds of items."""
    shown: int = 5
    """Items shown (labelled impressions) per request: an ads slot shows a handful of ads."""
    zipf_exponent: float = 0.8
    """Item popularity ∝ rank^-α: Zipf-like with α ≈ 0.6–0.9 in web/content request logs
    (Breslau et al., INFOCOM 1999)."""
    popularity_weight: float = 0.5
    """Weight of log-popularity in the retrieval score (popular items are retrieved more)."""
    retrieval_temperature: float = 0.17
    """Gumbel noise scale of retrieval. Calibrated so the Jaccard overlap of a user's consecutive
    candidate lists is ~0.5 (the 0.4–0.6 measured on converted MovieLens/Taobao traffic and
    the strong consecutive-request overlap the SOLARIS paper relies on)."""
    retrieval_pool: int = 400
    """Gumbel noise is applied to the best ``retrieval_pool`` items by noiseless score (noise at
    this temperature practically never lifts an item from below that rank into the top k)."""
    drift_days: float = 30.0
    """Time constant of the taste drift: user factors drift over weeks to months (Koren,
    "Collaborative filtering with temporal dynamics", KDD 2009)."""
    intent_scale: float = 0.5
    """Size of the per-session intent offset relative to the long-term taste (session-based
    recommendation: short-term intent differs from long-term taste)."""
    reclick_weight: float = 1.0
    """Click-logit bonus each click on an item adds to the user's later exposures of it (decays
    with ``reclick_hours``). Chosen, not calibrated (no shared dataset logs repeat exposures):
    with the fatigue below, an item the user clicked among their last 20 impressions is clicked
    ~50 % of the time when shown again, against ~6 % for an item not among them (~25 % with no
    memory: taste alone). In ``solaris evaluate``, 0.7 gave an FM-VM gap of 0.043 NE (0.021 to
    0.056 per seed), 1.0 gives 0.072 (0.067 to 0.078)."""
    reclick_hours: float = 6.0
    """Decay time (e-folding, event time) of the re-click bonus: interest in a just-clicked item
    lasts hours, so it survives an embedding computed minutes to hours before it is read."""
    fatigue_weight: float = 0.2
    """Click-logit penalty each exposure *without* a click adds to the user's later exposures of
    that item (wear-out: CTR falls with repeated unclicked exposure)."""
    fatigue_hours: float = 6.0
    """Decay time (e-folding, event time) of the fatigue."""
    affinity_weight: float = 1.0
    """Weight of taste·item (unit variance) in the click logit."""
    item_bias_sigma: float = 0.5
    """Spread of per-item click bias (some ads are simply more clickable)."""
    position_decay: float = 1.0
    """Position bias −η·ln(1 + position) in the click logit, i.e. examination ∝ 1/(1+p)^η with
    η ≈ 1 (Joachims et al., "Unbiased learning-to-rank", WSDM 2017)."""
    click_noise_sigma: float = 0.5
    """Per-impression logit noise: context the model cannot see."""
    ranker_noise_sigma: float = 1.0
    """Noise of the production ranker's estimate of the click logit (what decides ``shown``)."""
    label_rate: float = 0.10
    """Target share of positive impressions. Real ads CTRs are ~1–2 %, which would need 10× the
    traffic to train on in a demo; 10 % matches the engaged rate of the Taobao slice (10.8 %)."""

    def __post_init__(self) -> None:
        positive = (
            "n_users",
            "n_items",
            "dim",
            "days",
            "sessions_per_day",
            "gap_median_s",
            "k",
            "shown",
            "retrieval_pool",
            "drift_days",
            "retrieval_temperature",
            "reclick_hours",
            "fatigue_hours",
        )
        bad = [name for name in positive if not getattr(self, name) > 0]
        if self.requests_per_session < 1:
            bad.append("requests_per_session")
        if not 0 < self.label_rate < 1:
            bad.append("label_rate")
        if not (self.shown <= self.k <= min(self.n_items, self.retrieval_pool)):
            bad.append("shown <= k <= min(n_items, retrieval_pool)")
        if not 0 <= self.diurnal_amplitude <= 1:
            bad.append("diurnal_amplitude")
        if self.seed < 0:
            bad.append("seed")
        if bad:
            raise ConfigError(f"SyntheticConfig: invalid {', '.join(bad)}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
