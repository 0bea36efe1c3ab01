"""Faust table values <-> engine state. Tables serialise to JSON, whose object keys are strings,
so maps with integer keys are stored as lists of pairs."""

from __future__ import annotations

from typing import Any

#: request ids remembered per user in the ledger: a redelivered request is recognised within
#: the uncommitted window, which holds a handful of a user's requests at most
VERIFIED_REQUESTS_KEPT = 16


def ledger_from_table(value: Any) -> dict[int, int]:
    """The user's ``item -> embedded at`` map (old list-only values are still read)."""
    pairs = value.get("pairs", []) if isinstance(value, dict) else (value or [])
    return {int(i): int(t) for i, t in pairs}


def verified_requests_from_table(value: Any) -> list[str]:
    """Ids of the user's last verified requests (oldest first)."""
    return [str(r) for r in value.get("requests", [])] if isinstance(value, dict) else []


def ledger_to_table(ledger: dict[int, int], verified_requests: list[str]) -> dict[str, Any]:
    return {
        "pairs": [[i, t] for i, t in ledger.items()],
        "requests": verified_requests[-VERIFIED_REQUESTS_KEPT:],
    }


def history_from_table(value: Any) -> list[tuple[int, int, int]]:
    return [(int(i), int(lab), int(t)) for i, lab, t in (value or [])]


def history_to_table(entries: list[tuple[int, int, int]]) -> list[list[int]]:
    return [list(e) for e in entries]
