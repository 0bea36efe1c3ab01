"""The live summary: coverage by tier, FM cost, precision, dead letters, read latency, lag."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from store.tiers import TIER_NAMES
from streams.engine.coverage import cumulative_shares
from streams.live.stats import read_stats
from streams.settings import Settings


def live_summary(settings: Settings) -> dict[str, Any]:
    """Totals from the shared stats hashes (ranker + pipeline)."""
    stats = read_stats(settings)
    rk, pl = stats["ranker"], stats["pipeline"]
    lookups = {n: rk.get(f"lookups_{n}", 0.0) for n in TIER_NAMES}
    total = sum(lookups.values()) or 1.0
    share = {n: v / total for n, v in lookups.items()}
    requests = rk.get("requests", 0.0)
    embedded = pl.get("embedded", 0.0)
    return {
        "requests": int(requests),
        "lookups": int(sum(lookups.values())),
        "coverage": share,
        "cumulative": cumulative_shares(share),
        "fm_pairs": int(embedded),
        "fm_pairs_per_request": embedded / requests if requests else 0.0,
        "speculation_precision": rk.get("served_distinct", 0.0) / embedded if embedded else 0.0,
        "dead_letters": {
            k.removeprefix("dead_letters_"): int(v)
            for k, v in pl.items()
            if k.startswith("dead_letters_")
        },
        "read_ms": {"p50": rk.get("read_ms_p50", 0.0), "p99": rk.get("read_ms_p99", 0.0)},
        "reader_timeouts": int(rk.get("timeouts", 0.0)),
        "reader_store_errors": int(rk.get("store_errors", 0.0)),
        # requests served the plain VM because their read failed (see needs_baseline)
        "baseline_fallbacks": int(rk.get("baseline_fallbacks", 0.0)),
        # running NE in the ranker (impressions joined as they arrive; see QualityMeter)
        "running_ne": {
            k.removeprefix("live_ne_"): v for k, v in rk.items() if k.startswith("live_ne_")
        },
    }


def coverage_table(
    settings: Settings, summary: dict[str, Any] | None = None, max_lag: int | None = None
) -> Table:
    s = summary or live_summary(settings)
    table = Table("metric", "value", title="SOLARIS live")
    cum = s["cumulative"]
    table.add_row("requests ranked / lookups", f"{s['requests']:,} / {s['lookups']:,}")
    table.add_row("coverage exact", f"{cum['exact']:.3f}")
    table.add_row("coverage + state (decoded per item)", f"{cum['with_state']:.3f}")
    table.add_row("coverage + aggregate", f"{cum['with_aggregate']:.3f}")
    table.add_row("coverage + neighbours' item embedding", f"{cum['with_neighbour_item']:.3f}")
    table.add_row("coverage + neighbours' aggregates", f"{cum['with_neighbours']:.3f}")
    table.add_row(
        "FM pairs per request", f"{s['fm_pairs_per_request']:.2f} ({s['fm_pairs']:,} pairs)"
    )
    table.add_row("speculation precision", f"{s['speculation_precision']:.3f}")
    dl = s["dead_letters"]
    table.add_row("dead letters", f"{sum(dl.values())} " + (str(dl) if dl else ""))
    table.add_row(
        "read latency p50 / p99", f"{s['read_ms']['p50']:.2f} / {s['read_ms']['p99']:.2f} ms"
    )
    table.add_row(
        "read timeouts / errors / VM fallbacks",
        f"{s['reader_timeouts']} / {s['reader_store_errors']} / {s.get('baseline_fallbacks', 0)}",
    )
    if max_lag is not None:
        table.add_row("max consumer lag", str(max_lag))
    for name, value in quality_rows(s.get("quality")):
        table.add_row(name, value)
    return table


def quality_rows(quality: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Table rows of a live-quality summary (:mod:`streams.live.quality`)."""
    if not quality:
        return []
    if "ne" not in quality:
        return [("live quality", quality.get("note", "not measured"))]
    ne = quality["ne"]
    lo, hi = quality["transfer_ratio_ci"]
    return [
        ("live NE vm / vm_solaris served", f"{ne['vm']:.4f} / {ne['vm_solaris_served']:.4f}"),
        ("NE fm (fresh history, offline)", f"{ne['fm']:.4f}"),
        (
            "live transfer ratio vs id-only VM (95 % CI)",
            f"{quality['transfer_ratio']:.3f} ({lo:.3f} … {hi:.3f}), "
            f"{quality['impressions']:,} impressions",
        ),
        *fair_vm_rows(quality.get("vs_fair_vm")),
    ]


def _ratio(value: float | None, ci: list[float]) -> str:
    if value is None:
        return "undefined (no FM gain)"
    return f"{value:.3f} ({ci[0]:.3f} … {ci[1]:.3f})"


def fair_vm_rows(fair: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Rows of the gains over the fair VM (:func:`models.fair_gain.gains_over_fair_vm`)."""
    if not fair:
        return []
    if not fair.get("available"):
        return [("vs fair VM", fair.get("reason", "not measured"))]

    def gain(key: str) -> str:
        lo, hi = fair[f"{key}_ci95"]
        return f"{fair[key]:+.4f} [{lo:+.4f}, {hi:+.4f}] {fair[f'{key}_is']}"

    return [
        ("live NE fair VM", f"{fair['ne_vm_fair']:.4f}"),
        ("FM / served gain over fair VM", f"{gain('fm_gain')} / {gain('served_gain')}"),
        ("live transfer ratio vs fair VM (95 % CI)", fair_ratio_text(fair)),
    ]


def fair_ratio_text(fair: dict[str, Any], key: str = "transfer_ratio") -> str:
    """The ratio against the fair VM, or why it is not a result: where the FM's own gain over
    the fair VM is not positive by its interval the ratio divides by noise (or by a loss)."""
    if fair["fm_gain_is"] != "positive":
        return f"undefined: the FM's gain over the fair VM is {fair['fm_gain_is']}"
    return _ratio(fair[key], fair["transfer_ratio_ci95"])
