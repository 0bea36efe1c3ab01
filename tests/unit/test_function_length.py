"""Issue 23's bound: no function in streams/ over 60 lines (small steps that read in one screen)."""

from __future__ import annotations

import ast
from pathlib import Path

from streams.settings import REPO_ROOT

MAX_LINES = 60


def test_no_function_in_streams_is_longer_than_60_lines() -> None:
    long = []
    for path in sorted((REPO_ROOT / "streams").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(
                        f"{Path(path).relative_to(REPO_ROOT)}:{node.lineno} {node.name} {lines}"
                    )
    assert long == [], "functions over 60 lines: " + "; ".join(long)
