"""The demo report's figures, each drawn from the demo summary JSON alone (no service needed).

Every function takes the summary (see :func:`streams.app.demo.run_demo`) and returns a matplotlib
figure. A figure whose data the run did not record (e.g. live quality with too few labelled
impressions) still renders, with a note saying what is missing, so the page keeps its layout and
the reader sees why. matplotlib comes with the ``train`` extra; :mod:`.page` imports this module
only when it builds a report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never a display (headless hosts, threads)
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from store.tiers import TIER_NAMES

Summary = dict[str, Any]
#: cumulative coverage keys, best tier first, with their labels
CUMULATIVE = (
    ("exact", "exact"),
    ("with_state", "+ state"),
    ("with_aggregate", "+ aggregate"),
    ("with_neighbour_item", "+ neighbours' item"),
    ("with_neighbours", "+ neighbours' aggregates"),
)
#: one per tier, in code order (exact, aggregate, neighbour_item, neighbour_aggregate, state,
#: missing)
TIER_COLOURS = ("#1b7837", "#7fbf7b", "#af8dc3", "#762a83", "#f1a340", "#d9d9d9")
SIZE = (7.0, 3.6)


def _figure() -> tuple[Figure, Any]:
    fig, ax = plt.subplots(figsize=SIZE)
    ax.grid(alpha=0.3)
    return fig, ax


def _note(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555")


def _intervals(samples: list[Summary]) -> list[tuple[Summary, Summary]]:
    """Consecutive sample pairs in which the ranker published new requests."""
    pairs: list[tuple[Summary, Summary]] = []
    prev: Summary | None = None
    for s in samples:
        if prev is None:
            prev = s
        elif s["requests"] > prev["requests"]:
            pairs.append((prev, s))
            prev = s
    return pairs


def coverage_over_time(summary: Summary) -> Figure:
    """Share of each tier among the lookups of each interval, stacked, over replay time."""
    fig, ax = _figure()
    pairs = _intervals(summary.get("timeline", []))
    if not pairs:
        _note(ax, "no ranker samples recorded")
    else:
        xs = [b["t_s"] for _, b in pairs]
        shares = []
        for a, b in pairs:
            delta = [b["lookups"][n] - a["lookups"][n] for n in TIER_NAMES]
            total = sum(delta) or 1
            shares.append([d / total for d in delta])
        columns = list(zip(*shares, strict=True))
        labels = [n.replace("_", " ") for n in TIER_NAMES]
        ax.stackplot(xs, columns, labels=labels, colors=TIER_COLOURS, step="pre")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, loc="upper left", ncol=5)
    ax.set_xlabel("replay time (s)")
    ax.set_ylabel("share of lookups")
    ax.set_title("Coverage by tier over replay time (per sampling interval)")
    return fig


def lag_over_time(summary: Summary) -> Figure:
    """Max consumer lag (messages) per group over replay time."""
    fig, ax = _figure()
    samples = summary.get("timeline", [])
    groups = sorted({g for s in samples for g in s["lag"]})
    if not groups:
        _note(ax, "no lag samples recorded")
    prefix = _common_prefix(groups)
    for group in groups:
        pts = [(s["t_s"], s["lag"][group]) for s in samples if group in s["lag"]]
        ax.plot(*zip(*pts, strict=True), label=group[len(prefix) :] or group, lw=1.2)
    if groups:
        ax.legend(fontsize=8, loc="upper left")
    behind = [(s["t_s"], s["behind_ms"] / 1000) for s in samples if s.get("behind_ms") is not None]
    if behind:
        twin = ax.twinx()
        twin.plot(*zip(*behind, strict=True), color="grey", ls=":", lw=1.0)
        twin.set_ylabel("FM behind replay (event-time s, dotted)", fontsize=8)
    ax.set_xlabel("replay time (s)")
    ax.set_ylabel("consumer lag (messages)")
    ax.set_title(f"Consumer lag per group (max {summary.get('max_consumer_lag', 0):,})")
    return fig


def fm_pairs_per_request(summary: Summary) -> Figure:
    """FM pairs embedded per ranked request, per interval, with the run's and offline totals."""
    fig, ax = _figure()
    pairs = _intervals(summary.get("timeline", []))
    if pairs:
        xs = [b["t_s"] for _, b in pairs]
        ys = [(b["embedded"] - a["embedded"]) / (b["requests"] - a["requests"]) for a, b in pairs]
        ax.step(xs, ys, where="pre", lw=1.0, label="live, per interval")
    else:
        _note(ax, "no ranker samples recorded")
    ax.axhline(summary.get("fm_pairs_per_request", 0.0), color="C1", label="live, whole run")
    offline = summary.get("offline") or {}
    if "fm_pairs_per_request" in offline:
        ax.axhline(offline["fm_pairs_per_request"], color="C2", ls="--", label="offline simulator")
    ax.legend(fontsize=8)
    ax.set_xlabel("replay time (s)")
    ax.set_ylabel("FM pairs per request")
    ax.set_title("FM cost: pairs embedded per ranked request")
    return fig


def live_vs_offline(summary: Summary) -> Figure:
    """Cumulative coverage of the live run next to the simulator's on the same requests."""
    fig, ax = _figure()
    found = [("live", summary.get("cumulative"))]
    found += [(name, (summary.get(key) or {}).get("cumulative")) for key, name in OFFLINE_RUNS]
    runs: list[tuple[str, dict[str, float]]] = [(name, cum) for name, cum in found if cum]
    width = 0.8 / max(len(runs), 1)
    for i, (name, cum) in enumerate(runs):
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(CUMULATIVE))]
        ys = [cum.get(key, 0.0) for key, _ in CUMULATIVE]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.set_xticks(range(len(CUMULATIVE)), [label for _, label in CUMULATIVE], fontsize=8)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("cumulative coverage")
    ax.set_title("Live vs offline simulator, same requests")
    ax.legend(fontsize=8, loc="upper left")
    return fig


#: offline runs the report can show next to the live one: (summary key, legend)
OFFLINE_RUNS = (
    ("offline", "offline (lockstep)"),
    ("offline_at_latency", "offline at live latency"),
)


def read_latency(summary: Summary) -> Figure:
    """The ranker's read latency histogram (its Prometheus buckets) with p50/p99."""
    fig, ax = _figure()
    hist = summary.get("read_latency") or {}
    buckets = hist.get("buckets") or []
    if not buckets:
        _note(ax, "no read latency histogram scraped")
    else:
        labels, counts, prev = [], [], 0.0
        for le, cumulative in buckets:
            labels.append(f"≤{le * 1000:g}" if le != float("inf") else "more")
            counts.append(cumulative - prev)
            prev = cumulative
        ax.bar(range(len(counts)), counts, color="C0")
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ms = summary.get("read_ms") or {}
    ax.set_xlabel("read latency bucket (ms)")
    ax.set_ylabel("requests")
    ax.set_title(
        f"FeatureReader.lookup latency (p50 {ms.get('p50', 0):.2f} ms, p99 {ms.get('p99', 0):.2f} ms)"
    )
    return fig


def live_quality(summary: Summary) -> Figure:
    """NE of the plain VM, vm_solaris as served and the FM, with the live transfer ratio."""
    fig, ax = _figure()
    quality = summary.get("quality") or {}
    ne = quality.get("ne")
    if not ne:
        _note(ax, f"live quality not measured: {quality.get('note', 'no scores')}")
    else:
        names = [("vm", "VM"), ("vm_solaris_served", "VM + SOLARIS (served)"), ("fm", "FM")]
        cis = quality.get("ne_ci") or {}
        ys = [ne[k] for k, _ in names]
        errs = [_err(ne[k], cis.get(k)) for k, _ in names]
        bars = ax.bar([label for _, label in names], ys, color=["C7", "C0", "C3"])
        ax.errorbar(range(3), ys, yerr=list(zip(*errs, strict=True)), fmt="none", color="k")
        ax.bar_label(bars, fmt="%.4f", fontsize=8)
        ax.set_ylim(min(ys) * 0.97, max(ys) * 1.02)
        lo, hi = quality["transfer_ratio_ci"]
        ax.set_title(
            f"Live quality: transfer ratio {quality['transfer_ratio']:.3f} "
            f"(95 % CI {lo:.3f} … {hi:.3f}, {quality['impressions']:,} impressions)",
            fontsize=9,
        )
    ax.set_ylabel("normalized entropy (lower is better)")
    if not ne:
        ax.set_title("Live quality")
    return fig


def _err(value: float, ci: list[float] | None) -> tuple[float, float]:
    if not ci:
        return (0.0, 0.0)
    return (max(value - ci[0], 0.0), max(ci[1] - value, 0.0))


def _common_prefix(names: list[str]) -> str:
    """The shared ``<topic prefix>-`` of the group names (dropped from the legend)."""
    if len(names) < 2:
        return ""
    head = names[0]
    n = 0
    while all(len(x) > n and x[n] == head[n] for x in names):
        n += 1
    return head[: head.rfind("-", 0, n) + 1]


#: (anchor id, caption, figure function), in page order
FIGURES: tuple[tuple[str, str, Callable[[Summary], Figure]], ...] = (
    ("coverage-over-time", "Coverage by tier over replay time", coverage_over_time),
    ("lag-over-time", "Consumer lag over time", lag_over_time),
    ("fm-pairs", "FM pairs per request", fm_pairs_per_request),
    ("live-vs-offline", "Live vs offline coverage", live_vs_offline),
    ("read-latency", "Read latency histogram", read_latency),
    ("live-quality", "Live quality", live_quality),
)
