"""The simulate report (JSON shape fixed by the issue; more keys welcome) and its table."""

from __future__ import annotations

from typing import Any

import numpy as np

from streams.simulate.simulator import Simulator


def run_summary(sim: Simulator) -> dict[str, Any]:
    """Counters of one run."""
    reads = np.asarray(sim.read_ms) if sim.read_ms else np.zeros(1)
    verifier = sim.verifier.stats if sim.verifier is not None else None
    return {
        "requests": sim.requests,
        "lookups": sim.coverage.total,
        "coverage": sim.coverage.shares(),
        "cumulative": sim.coverage.cumulative(),
        "labelled": {
            "lookups": sim.labelled.total,
            "coverage": sim.labelled.shares(),
            "cumulative": sim.labelled.cumulative(),
        },
        "fm_pairs": sim.speculation.embedded,
        "fm_pairs_per_request": sim.speculation.embedded / max(sim.requests, 1),
        "speculation_precision": sim.speculation.precision,
        "verifier_drop_rate": verifier.drop_rate if verifier else 0.0,
        "proposals": sim.stages.speculator.stats.proposed,
        "skipped_fresh": sim.stages.speculator.stats.skipped_fresh,
        "read_ms": {"p50": float(np.percentile(reads, 50)), "p99": float(np.percentile(reads, 99))},
        "reader": {
            "timeouts": sim.reader.stats.timeouts,
            "store_errors": sim.reader.stats.store_errors,
            "cold_start_queries": sim.reader.stats.cold_start_queries,
        },
    }


def combine(
    achieved: dict[str, Any],
    oracle: dict[str, Any],
    candidates_per_request: float,
    random_same_budget: dict[str, Any] | None = None,
    foresight_same_budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report: achieved run + oracle coverage + efficiency (+ random and foresight
    baselines at the same per-request budget)."""
    out = dict(achieved)
    out["oracle"] = oracle["cumulative"]
    out["fm_pairs_per_request_oracle"] = oracle["fm_pairs_per_request"]
    out["fm_pairs_per_request_all_candidates"] = candidates_per_request
    out["fm_cost_ratio"] = (
        achieved["fm_pairs_per_request"] / candidates_per_request if candidates_per_request else 0.0
    )
    oracle_exact = oracle["cumulative"]["exact"]
    out["speculation_efficiency"] = (
        achieved["cumulative"]["exact"] / oracle_exact if oracle_exact else 0.0
    )
    out["labelled"] = dict(achieved["labelled"], oracle=oracle["labelled"]["cumulative"])
    for key, run in (
        ("random_same_budget", random_same_budget),
        ("foresight_same_budget", foresight_same_budget),
    ):
        if run is not None:
            out[key] = {
                "cumulative": run["cumulative"],
                "labelled": run["labelled"]["cumulative"],
                "fm_pairs_per_request": run["fm_pairs_per_request"],
                "speculation_efficiency": run["cumulative"]["exact"] / oracle_exact
                if oracle_exact
                else 0.0,
            }
    return out


def markdown_table(report: dict[str, Any]) -> str:
    """Coverage table: achieved vs oracle (vs random), all candidates and labelled."""
    rows = [
        "| | exact | +aggregate | +neighbours' item | +neighbours' aggregates | FM pairs/request |",
        "|---|---|---|---|---|---|",
    ]

    def row(name: str, cum: dict[str, float], cost: float | str) -> None:
        c = f"{cost:.2f}" if isinstance(cost, float) else cost
        rows.append(
            f"| {name} | {cum['exact']:.3f} | {cum['with_aggregate']:.3f} "
            f"| {cum.get('with_neighbour_item', float('nan')):.3f} "
            f"| {cum['with_neighbours']:.3f} | {c} |"
        )

    row("achieved (all candidates)", report["cumulative"], report["fm_pairs_per_request"])
    row("oracle (all candidates)", report["oracle"], report["fm_pairs_per_request_oracle"])
    for key, name in (
        ("random_same_budget", "random, same budget"),
        ("foresight_same_budget", "foresight (ceiling), same budget"),
    ):
        if key in report:
            run = report[key]
            row(name, run["cumulative"], run["fm_pairs_per_request"])
    row("achieved (labelled)", report["labelled"]["cumulative"], "")
    row("oracle (labelled)", report["labelled"]["oracle"], "")
    rows.append("")
    rows.append(
        f"requests {report['requests']}, lookups {report['lookups']}, candidates/request "
        f"{report['fm_pairs_per_request_all_candidates']:.1f}, FM cost ratio {report['fm_cost_ratio']:.2f}, "
        f"speculation efficiency {report['speculation_efficiency']:.3f}"
        + (
            f" (ceiling at this budget {report['foresight_same_budget']['speculation_efficiency']:.3f})"
            if "foresight_same_budget" in report
            else ""
        )
        + ", precision "
        f"{report['speculation_precision']:.3f}, verifier drop rate {report['verifier_drop_rate']:.3f}"
    )
    rows += quality_lines(report)
    if "sweep" in report:
        rows += ["", *sweep_table(report["sweep"])]
    return "\n".join(rows)


def quality_lines(report: dict[str, Any]) -> list[str]:
    """NE on test impressions, the transfer ratio and its split by tier; then against the fair
    VM (the id-only figures say so when both are there)."""
    rows = []
    id_only = "vs the id-only verifier" if "vs_fair_vm" in report else ""
    if "ne" in report:
        rows.append(
            "NE on test impressions: "
            + ", ".join(f"{k} {v['ne']:.4f}" for k, v in report["ne"].items())
            + f"; transfer ratio at achieved coverage {report['transfer_ratio_at_achieved']:.3f}"
            + (f" ({id_only})" if id_only else "")
        )
    if "transfer_by_tier" in report:
        rows.append(
            "by served tier (share of test impressions, transfer ratio within, contribution"
            + (f", {id_only}" if id_only else "")
            + "): "
            + "; ".join(
                f"{tier} {v['share']:.3f}, {v['transfer_ratio']:.3f}, {v['contribution']:.3f}"
                for tier, v in report["transfer_by_tier"].items()
            )
        )
    if "vs_fair_vm" in report:
        rows.append(fair_vm_line(report["vs_fair_vm"]))
    return rows


def fair_vm_line(fair: dict[str, Any]) -> str:
    """The transfer against the fair VM in one line (or why there is none)."""
    if not fair.get("available"):
        return f"against the fair VM: none ({fair.get('reason')})"

    def gain(key: str) -> str:
        lo, hi = fair[f"{key}_ci95"]
        return f"{fair[key]:+.4f} [{lo:+.4f}, {hi:+.4f}] {fair[f'{key}_is']}"

    tr = fair["transfer_ratio_at_achieved"]
    lo, hi = fair["transfer_ratio_ci95"]
    return (
        f"against the fair VM (NE {fair['ne_vm_fair']:.4f}): FM gain {gain('fm_gain')}, "
        f"served gain {gain('served_gain')}; transfer ratio at achieved coverage "
        + ("n/a" if tr is None else f"{tr:.3f} [{lo:.2f}, {hi:.2f}]")
        + ("" if fair["fm_gain_is"] == "positive" else " (divides by a gain that is not positive)")
    )


def sweep_table(result: dict[str, Any]) -> list[str]:
    """One row per (TTL, budget, selector): cost, exact (all | labelled), efficiency."""
    rows = [
        "| TTL | budget | selector | FM pairs/request | exact (all) | exact (labelled) | efficiency |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        rows.append(
            f"| {r['ttl_ms'] / 3_600_000:g} h | {r['budget_fraction']:.0%} | {r['selector']} | "
            f"{r['fm_pairs_per_request']:.2f} | {r['cumulative']['exact']:.3f} | "
            f"{r['labelled']['exact']:.3f} | {r['efficiency']:.3f} |"
        )
    for ttl, o in result["oracle"].items():
        rows.append(
            f"| {int(ttl) / 3_600_000:g} h | all | oracle | {o['fm_pairs_per_request']:.2f} | "
            f"{o['cumulative']['exact']:.3f} | {o['labelled']['exact']:.3f} | 1.000 |"
        )
    return rows
