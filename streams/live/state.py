"""Faust table values <-> engine state. Tables serialise to JSON, whose object keys are strings,
so maps with integer keys are stored as lists of pairs."""

from __future__ import annotations

from typing import Any


def ledger_from_table(value: Any) -> dict[int, int]:
    return {int(i): int(t) for i, t in (value or [])}


def ledger_to_table(ledger: dict[int, int]) -> list[list[int]]:
    return [[i, t] for i, t in ledger.items()]


def history_from_table(value: Any) -> list[tuple[int, int, int]]:
    return [(int(i), int(lab), int(t)) for i, lab, t in (value or [])]


def history_to_table(entries: list[tuple[int, int, int]]) -> list[list[int]]:
    return [list(e) for e in entries]
