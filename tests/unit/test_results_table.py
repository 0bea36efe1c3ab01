"""docs/knowledge-transfer.md's bar table is rebuilt from committed JSONs (issue 22 item 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from models.results import main, provenance, table


def _report(commit: str = "abcdef1234") -> dict:
    bar = {
        "tr_served": 0.5,
        "tr_kd": 0.25,
        "headroom_closure": 1 / 3,
        "headroom_closure_ci95": [0.1, 0.5],
        "ne_kd_minus_served": 0.01234,
        "ne_kd_minus_served_ci95": [0.002, 0.02],
    }
    return {
        "models": {"vm": {"ne": 0.95}, "vm_id_only": {"ne": 0.97}, "fm": {"ne": 0.85}},
        "fm_vm_gap": {"ne": 0.1, "ci95": [0.05, 0.15]},
        "beats_kd": bar,
        "beats_kd_state_tier": {
            **bar,
            "headroom_closure": 0.6,
            "headroom_closure_ci95": [0.4, 0.8],
        },
        "lagged": {
            "10m": {
                "transfer_ratio": {
                    "solaris_aggregate": 0.2,
                    "solaris_item_aware": 0.3,
                    "solaris_state_aware": 0.7,
                }
            }
        },
        "provenance": {"commit": commit, "date": "2026-12-02T18:00:00+00:00"},
    }


def test_a_row_carries_every_figure_and_the_commit() -> None:
    text = table({"ml-x": _report()})
    header, rule, row = text.splitlines()
    assert header.count("|") == rule.count("|") == row.count("|")
    assert row.startswith(
        "| ml-x | 0.9500 / 0.9700 | 0.8500 | 0.1000 [0.0500, 0.1500] positive "
        "| 0.0250 / 0.0500 / 0.0500 | 0.250 |"
    )
    assert "0.333 [0.10, 0.50]" in row and "0.0123 [0.0020, 0.0200]" in row
    assert "0.600 [0.40, 0.80]" in row  # with the state tier
    assert "0.200 / 0.300 / 0.700" in row and row.endswith("| abcdef1 |")


def test_cli_reads_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ml-x.json"
    path.write_text(json.dumps(_report()))
    main([str(path)])
    assert "| ml-x |" in capsys.readouterr().out


def test_provenance_names_this_checkout() -> None:
    got = provenance()
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", got["commit"])
    assert got["date"].startswith("20")


@pytest.mark.parametrize(
    ("head", "status", "dirty"),
    [("a" * 40, "", False), ("a" * 40, " M streams/x.py", True), (None, None, None)],
)
def test_provenance_says_when_the_figures_come_from_uncommitted_code(
    monkeypatch: pytest.MonkeyPatch, head: str | None, status: str | None, dirty: bool | None
) -> None:
    import models.results as results

    answers = {"rev-parse": head, "status": status}
    monkeypatch.setattr(results, "_git", lambda *args: answers[args[0]])
    got = provenance()
    assert got["dirty"] is dirty and got["commit"] == (head or "unknown")
