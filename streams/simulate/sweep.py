"""Coverage vs FM cost: a grid over verifier budget and TTL, speculative vs random selection.

Every point runs the simulator with a zero-cost FM (coverage does not depend on the vectors) and
the real VM as verifier; selectors at each budget: the configured ranking ("speculative"), the
VM's relevance ranking ("vm", when the configured one is something else), a random scorer
("random") and a scorer that knows each pair's future lookups ("foresight": the ceiling of any
selection at that budget); one oracle run per TTL gives the unlimited-budget ceiling. Output: JSON rows and an optional PNG plot (matplotlib, from the ``train`` extra).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streams.engine.models import EngineModels
from streams.simulate.baselines import NullFM, RandomScorer
from streams.simulate.config import SimConfig
from streams.simulate.report import run_summary
from streams.simulate.run import Events, foresight_scorer, gated, oracle_config, reference
from streams.simulate.simulator import Simulator

FRACTIONS = (0.1, 0.25, 0.5)
TTLS_MS = (3_600_000, 4 * 3_600_000)


def _point(events: Events, cfg: SimConfig, models: EngineModels) -> dict[str, Any]:
    sim = Simulator(gated(cfg, models.fm), models)
    sim.run(events())
    s = run_summary(sim)
    return {
        "cumulative": s["cumulative"],
        "labelled": s["labelled"]["cumulative"],
        "fm_pairs_per_request": s["fm_pairs_per_request"],
        "precision": s["speculation_precision"],
    }


def sweep(
    events: Events,
    base: SimConfig,
    models: EngineModels,
    fractions: Sequence[float] = FRACTIONS,
    ttls_ms: Sequence[int] = TTLS_MS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Rows of (ttl, fraction, selector) -> coverage and FM pairs per request."""
    null = NullFM(base.reader.dim)
    base = reference(base)  # every point embeds with NullFM; _point gates the reader to it
    rows: list[dict[str, Any]] = []
    oracles: dict[int, dict[str, Any]] = {}
    seer = foresight_scorer(events, max(ttls_ms))  # one pass over the traffic for every TTL
    for ttl in ttls_ms:
        reader = dataclasses.replace(base.reader, pair_ttl_ms=ttl)
        cfg_ttl = base.with_changes(reader=reader, test_start_ms=None)
        oracles[ttl] = _point(
            events, oracle_config(cfg_ttl), EngineModels(null, items=models.items)
        )
        rank_by = base.verifier.rank_by
        selectors = [("speculative", models.vm, rank_by)]
        if rank_by != "vm":
            selectors.append(("vm", models.vm, "vm"))
        selectors.append(("random", RandomScorer(11), "vm"))
        selectors.append(("foresight", seer.with_horizon(ttl), "vm"))
        for frac in fractions:
            for selector, scorer, ranking in selectors:
                verifier = dataclasses.replace(
                    base.verifier, threshold=None, top_k=None, top_fraction=frac, rank_by=ranking
                )
                cfg = cfg_ttl.with_changes(verifier=verifier)
                if progress is not None:
                    progress(f"ttl {ttl // 60_000} min, budget {frac:.2f}, {selector}")
                point = _point(events, cfg, EngineModels(null, scorer, items=models.items))
                point.update(ttl_ms=ttl, budget_fraction=frac, selector=selector)
                point["efficiency"] = point["cumulative"]["exact"] / max(
                    oracles[ttl]["cumulative"]["exact"], 1e-12
                )
                rows.append(point)
    return {"rows": rows, "oracle": {str(k): v for k, v in oracles.items()}}


def plot(result: dict[str, Any], path: Path, title: str) -> Path | None:
    """Coverage (exact and with aggregate; all candidates and labelled) vs FM pairs per request."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key, name in (
        (axes[0], "cumulative", "all candidates"),
        (axes[1], "labelled", "labelled items"),
    ):
        for ttl in sorted({r["ttl_ms"] for r in result["rows"]}):
            styles = (("speculative", "-o"), ("vm", "-.s"), ("random", "--x"), ("foresight", ":^"))
            for selector, style in styles:
                pts = sorted(
                    (r for r in result["rows"] if r["ttl_ms"] == ttl and r["selector"] == selector),
                    key=lambda r: r["fm_pairs_per_request"],
                )
                if not pts:
                    continue
                xs = [r["fm_pairs_per_request"] for r in pts]
                ax.plot(
                    xs,
                    [r[key]["exact"] for r in pts],
                    style,
                    label=f"exact, {selector}, TTL {ttl // 3_600_000} h",
                )
            oracle = result["oracle"][str(ttl)]
            ax.axhline(oracle[key]["exact"], color="grey", lw=0.8, ls=":")
        ax.set_title(f"{title}: {name}")
        ax.set_xlabel("FM pairs embedded per request")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact coverage (dotted: oracle)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["FRACTIONS", "TTLS_MS", "plot", "sweep"]
