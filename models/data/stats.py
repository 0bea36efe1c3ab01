"""Summary statistics of recorded traffic, the ones SOLARIS's coverage depends on.

Coverage is decided first by the traffic: how soon a user sends the next request (inter-request
gap shares, the ERCache statistic) and how much consecutive candidate lists overlap (Jaccard).
The generator's calibration test and ``solaris data traffic`` both use :func:`traffic_stats`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from models.data.columns import Impressions, Requests

MINUTE_MS = 60_000
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class TrafficStats:
    """Summary of one traffic file; shares are in [0, 1], NaN when undefined (no pairs).

    ``gap_share_*``: of the gaps between a user's consecutive requests, the share <= 1 min /
    10 min / 4 h. ``consecutive_jaccard``: mean Jaccard similarity of the candidate sets of a
    user's consecutive requests. ``first_request_share``: share of requests that are their user's
    first. ``returning_user_share``: share of users with requests on >= 2 distinct UTC days.
    """

    requests: int
    impressions: int
    users: int
    items: int
    candidates_mean: float
    candidates_p50: float
    candidates_p95: float
    impressions_per_request: float
    label_rate: float
    first_event_ms: int
    last_event_ms: int
    span_days: float
    gap_share_1m: float
    gap_share_10m: float
    gap_share_4h: float
    first_request_share: float
    returning_user_share: float
    active_days_mean: float
    consecutive_jaccard: float

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready)."""
        return asdict(self)


def _share(mask: np.ndarray) -> float:
    return float(mask.mean()) if mask.size else float("nan")


def _days_per_user(users: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Distinct UTC days with a request, per user (int64, one entry per user)."""
    if users.size == 0:
        return np.zeros(0, dtype=np.int64)
    pairs = np.unique(np.stack([users, times // DAY_MS]), axis=1)
    return np.unique(pairs[0], return_counts=True)[1]


def consecutive_jaccard(requests: Requests, order: np.ndarray) -> np.ndarray:
    """Jaccard of candidate sets for each consecutive same-user pair in ``order`` (float64)."""
    users = requests.user_id[order]
    same = np.flatnonzero(users[1:] == users[:-1])
    off = requests.cand_offsets
    cands = requests.candidates
    out = np.empty(same.shape[0], dtype=np.float64)
    prev_i = -1
    prev: set[int] = set()
    for k, j in enumerate(same.tolist()):
        a_i, b_i = int(order[j]), int(order[j + 1])
        a = prev if a_i == prev_i else set(cands[off[a_i] : off[a_i + 1]].tolist())
        b = set(cands[off[b_i] : off[b_i + 1]].tolist())
        union = len(a | b)
        out[k] = len(a & b) / union if union else 1.0
        prev_i, prev = b_i, b
    return out


def traffic_stats(requests: Requests, impressions: Impressions) -> TrafficStats:
    """Compute :class:`TrafficStats`; O(n log n) plus one pass over consecutive pairs."""
    n = len(requests)
    times = requests.event_time_ms
    sizes = requests.n_candidates
    order = np.lexsort((times, requests.user_id))  # by user, then time (stable)
    users_sorted = requests.user_id[order]
    same_user = users_sorted[1:] == users_sorted[:-1]
    gaps = np.diff(times[order])[same_user]
    user_ids, user_first = np.unique(requests.user_id, return_index=True)
    days_per_user = _days_per_user(requests.user_id, times)
    items = np.union1d(requests.candidates, impressions.item_id)
    jac = consecutive_jaccard(requests, order) if n else np.zeros(0)
    first_ms = int(times[0]) if n else 0
    last_ms = int(times[-1]) if n else 0
    return TrafficStats(
        requests=n,
        impressions=len(impressions),
        users=int(user_ids.shape[0]),
        items=int(items.shape[0]),
        candidates_mean=float(sizes.mean()) if n else float("nan"),
        candidates_p50=float(np.percentile(sizes, 50)) if n else float("nan"),
        candidates_p95=float(np.percentile(sizes, 95)) if n else float("nan"),
        impressions_per_request=len(impressions) / n if n else float("nan"),
        label_rate=_share(impressions.label.astype(np.float64)),
        first_event_ms=first_ms,
        last_event_ms=last_ms,
        span_days=(last_ms - first_ms) / DAY_MS,
        gap_share_1m=_share(gaps <= MINUTE_MS),
        gap_share_10m=_share(gaps <= 10 * MINUTE_MS),
        gap_share_4h=_share(gaps <= 240 * MINUTE_MS),
        first_request_share=user_first.shape[0] / n if n else float("nan"),
        returning_user_share=_share(days_per_user >= 2),
        active_days_mean=float(days_per_user.mean()) if days_per_user.size else float("nan"),
        consecutive_jaccard=float(jac.mean()) if jac.size else float("nan"),
    )


def stats_rows(stats: TrafficStats) -> list[tuple[str, str]]:
    """Human-readable (name, value) rows for a summary table."""
    return [
        ("requests", f"{stats.requests:,}"),
        ("impressions", f"{stats.impressions:,} ({stats.impressions_per_request:.2f}/request)"),
        ("users", f"{stats.users:,}"),
        ("items", f"{stats.items:,}"),
        (
            "candidates / request",
            f"mean {stats.candidates_mean:.1f}, p50 "
            f"{stats.candidates_p50:.0f}, p95 {stats.candidates_p95:.0f}",
        ),
        ("label rate", f"{stats.label_rate:.3f}"),
        ("time span", f"{stats.span_days:.2f} days"),
        (
            "gap <= 1 min / 10 min / 4 h",
            f"{stats.gap_share_1m:.3f} / {stats.gap_share_10m:.3f} / {stats.gap_share_4h:.3f}",
        ),
        ("first requests of a user", f"{stats.first_request_share:.3f}"),
        (
            "users active on >= 2 days",
            f"{stats.returning_user_share:.3f} (mean {stats.active_days_mean:.2f} days)",
        ),
        ("consecutive candidate Jaccard", f"{stats.consecutive_jaccard:.3f}"),
    ]
