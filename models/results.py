"""The "beats distillation" table of docs/knowledge-transfer.md, from committed evaluate JSONs.

Issue 22 item 5: every figure in that page's summary comes from a JSON committed under
``docs/results/`` with the commit and date that produced it (``provenance``, stamped by
``solaris evaluate --json``). ``python -m models.results docs/results/issue22/*.json`` prints
the table, so a reader can check each cell against its file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _git(*args: str) -> str | None:
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(here), *args], capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance() -> dict[str, str | bool | None]:
    """The commit of the code that is running (this package's checkout), whether tracked files
    differed from it (``dirty``: the figures then come from uncommitted code; None outside a
    checkout) and the UTC time."""
    commit = _git("rev-parse", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "commit": commit or "unknown",
        "dirty": None if changed is None else bool(changed),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _num(x: Any, digits: int = 3) -> str:
    return "–" if x is None else f"{float(x):.{digits}f}"


def _ci(pair: Any, digits: int = 2) -> str:
    if not pair or pair[0] is None or pair[1] is None:
        return "[–]"
    return f"[{float(pair[0]):.{digits}f}, {float(pair[1]):.{digits}f}]"


def _bar_cells(bar: dict[str, Any] | None) -> list[str]:
    if bar is None:
        return ["–", "–", "–"]
    return [
        _num(bar["tr_served"]),
        f"{_num(bar['headroom_closure'])} {_ci(bar['headroom_closure_ci95'])}",
        f"{_num(bar['ne_kd_minus_served'], 4)} {_ci(bar['ne_kd_minus_served_ci95'], 4)}",
    ]


def _verdict(ci: Any) -> str:
    lo, hi = ci
    if lo is None or hi is None:
        return "?"
    return "positive" if lo > 0 else ("negative" if hi < 0 else "within noise")


def _gains(report: dict[str, Any]) -> str:
    """NE gains over the VM of tuned KD and of the served mix(es): what to read when the FM's
    own gain is not positive (a transfer ratio then divides by noise)."""
    vm = report["models"]["vm"]["ne"]
    gap = report["fm_vm_gap"]["ne"]
    kd_ne = report["models"].get("vm_kd", {}).get("ne")

    def kd_gain(bar: dict[str, Any]) -> float | None:
        if bar.get("tr_kd") is not None and gap is not None:
            return bar["tr_kd"] * gap
        # transfer undefined (TRs null): the same gain from the NEs, no ratio involved
        return None if kd_ne is None or vm is None else vm - kd_ne

    parts = []
    for key in ("beats_kd", "beats_kd_state_tier"):
        bar = report.get(key)
        if bar is None:
            continue
        if bar.get("tr_served") is not None and gap is not None:
            parts.append(_num(bar["tr_served"] * gap, 4))
        else:  # NE_vm − NE_served = (NE_vm − NE_kd) + (NE_kd − NE_served)
            base, diff = kd_gain(bar), bar.get("ne_kd_minus_served")
            parts.append(_num(None if base is None or diff is None else base + diff, 4))
    kd = report.get("beats_kd")
    return f"{_num(kd_gain(kd), 4) if kd else '–'} / " + " / ".join(parts)


def _row(name: str, report: dict[str, Any]) -> str:
    models = report["models"]
    gap = report["fm_vm_gap"]
    lag = next(
        (
            b
            for k, b in report.get("lagged", {}).items()
            if "solaris_item_aware" in b["transfer_ratio"]
        ),
        None,
    )
    within = "–"
    if lag is not None:
        tr = lag["transfer_ratio"]
        within = " / ".join(
            _num(tr.get(k))
            for k in ("solaris_aggregate", "solaris_item_aware", "solaris_state_aware")
        )
    id_only = models.get("vm_id_only", {}).get("ne")
    bar = report.get("beats_kd")
    cells = [
        name,
        f"{_num(models['vm']['ne'], 4)} / {_num(id_only, 4)}",
        _num(models["fm"]["ne"], 4),
        f"{_num(gap['ne'], 4)} {_ci(gap['ci95'], 4)} {_verdict(gap['ci95'])}",
        _gains(report),
        _num(bar["tr_kd"] if bar else None),
        *_bar_cells(bar),
        *_bar_cells(report.get("beats_kd_state_tier"))[1:3],
        within,
        report.get("provenance", {}).get("commit", "unknown")[:7],
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| data | NE vm (fair / id-only) | NE fm | FM gain over vm [95 % CI] "
    "| NE gain over vm: kd / served / offline state swap | TR kd (tuned) "
    "| TR served | h [95 % CI] | NE(kd) − NE(served) [paired 95 % CI] "
    "| offline state swap: h [95 % CI] | offline state swap: NE(kd) − NE(served) [paired 95 % CI] "
    "| within-tier TR: aggregate / item / state | commit |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def table(reports: dict[str, dict[str, Any]]) -> str:
    """Markdown: one row per report (name → evaluate JSON)."""
    return "\n".join([HEADER, *(_row(name, r) for name, r in reports.items())])


def main(argv: list[str] | None = None) -> None:
    """``python -m models.results FILE...``: the table of these evaluate JSONs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    reports = {p.stem: json.loads(p.read_text()) for p in args.files}
    print(table(reports))


if __name__ == "__main__":
    main()
