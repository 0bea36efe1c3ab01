"""The neighbour tiers of a lookup: the neighbours' pair vectors of each candidate item
(similarity-weighted, *neighbour_item*), else the mean of their aggregates (item-blind,
*neighbour_aggregate*); and the freshness rule every tier applies to a stored value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store.batch_decode import decode_many
from store.reader_config import ReaderConfig, ReaderStats
from store.reader_types import Lookup
from store.tiers import Tier


def fresh_mask(
    present: np.ndarray | bool,
    times: np.ndarray,
    tags: np.ndarray,
    t: int,
    ttl: int,
    version_tag: int | None,
) -> np.ndarray:
    """Which values may serve a request at ``t``: present, produced strictly earlier, within
    ``ttl`` at ``t``, and of the served model (``version_tag``; None = any)."""
    ok = present & (times < t) & (t - times <= ttl)
    if version_tag is not None:
        ok &= tags == version_tag
    return ok


def blend_neighbours(
    cfg: ReaderConfig,
    stats: ReaderStats,
    t: int,
    nb_w: np.ndarray,
    rest_idx: np.ndarray,
    with_pairs: bool,
    pair_values: Sequence[bytes | None],
    agg_values: Sequence[bytes | None],
    out: Lookup,
) -> None:
    """Neighbour tiers of ``rest_idx`` from the neighbours' values (pairs neighbour-major
    over the rest's items, only ``with_pairs``; aggregates in neighbour order)."""
    k, m = len(nb_w), len(rest_idx)
    filled = np.zeros(m, dtype=bool)
    if with_pairs:
        dec = decode_many(pair_values, cfg.dim)
        stats.corrupt_values += dec.corrupt
        fresh = fresh_mask(
            dec.present, dec.event_time_ms, dec.version_tag, t, cfg.pair_ttl_ms, cfg.version_tag
        ).reshape(k, m)
        w = fresh * nb_w[:, None]  # [k, m]
        den = w.sum(axis=0)
        filled = den > 0
        if filled.any():
            vecs = dec.vectors.reshape(k, m, cfg.dim)
            mean = np.einsum("km,kmd->md", w[:, filled], vecs[:, filled]) / den[filled, None]
            times = np.where(fresh, dec.event_time_ms.reshape(k, m), np.iinfo(np.int64).max)
            idx = rest_idx[filled]
            out.vectors[idx] = mean
            out.tiers[idx] = Tier.NEIGHBOUR_ITEM
            out.ages_ms[idx] = t - times[:, filled].min(axis=0)
    if filled.all():
        return
    agg = decode_many(agg_values, cfg.dim)
    stats.corrupt_values += agg.corrupt
    fresh_agg = fresh_mask(
        agg.present,
        agg.event_time_ms,
        agg.version_tag,
        t,
        cfg.neighbour_aggregate_ttl_ms,
        cfg.version_tag,
    )
    if not fresh_agg.any():
        return
    w = nb_w * fresh_agg
    mean = (w[:, None] * agg.vectors).sum(axis=0) / w.sum()
    idx = rest_idx[~filled]
    out.vectors[idx] = mean
    out.tiers[idx] = Tier.NEIGHBOUR_AGGREGATE
    out.ages_ms[idx] = t - agg.event_time_ms[fresh_agg].min()
