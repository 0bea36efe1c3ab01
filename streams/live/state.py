"""Faust table values <-> engine state. Tables serialise to JSON, whose object keys are strings,
so maps with integer keys are stored as lists of pairs."""

from __future__ import annotations

from typing import Any

from streams.engine.steps.verify import VERIFIED_REQUESTS_KEPT, LedgerState


def ledger_from_table(value: Any) -> LedgerState:
    """The user's ledger (old list-only values, pairs without request ids, are still read)."""
    if isinstance(value, dict):
        pairs, requests = value.get("pairs", []), value.get("requests", [])
    else:
        pairs, requests = value or [], []
    return LedgerState({int(i): int(t) for i, t in pairs}, [str(r) for r in requests])


def ledger_to_table(ledger: LedgerState) -> dict[str, Any]:
    return {
        "pairs": [[i, t] for i, t in ledger.pairs.items()],
        "requests": ledger.requests[-VERIFIED_REQUESTS_KEPT:],
    }


def history_from_table(value: Any) -> list[tuple[int, int, int]]:
    return [(int(i), int(lab), int(t)) for i, lab, t in (value or [])]


def history_to_table(entries: list[tuple[int, int, int]]) -> list[list[int]]:
    return [list(e) for e in entries]
