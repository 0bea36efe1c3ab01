"""``solaris models check PATH``: does an ONNX file meet the FM contract (``models.fm_contract``)?

For a team bringing its own foundation model: run it before putting the file in a bundle as
``fm.onnx``. Exit 0 = it meets the contract; 1 = each problem printed on its own line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()
app = typer.Typer(help="Check models against SOLARIS's contracts.", no_args_is_help=True)


@app.command("check")
def check(
    path: Annotated[Path, typer.Argument(help="The ONNX file of a foundation model.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """Validate an FM graph: input/output names, dtypes and ranks, metadata, one dummy batch."""
    from models.fm_contract import check_fm

    report = check_fm(path)
    if as_json:
        verdict = {
            "path": str(report.path),
            "ok": report.ok,
            "problems": report.problems,
            "model_version": report.model_version,
            "dim": report.dim,
            "history_len": report.history_len,
        }
        console.print_json(json.dumps(verdict))
    elif report.ok:
        console.print(
            f"ok: {path} meets the FM contract (model_version={report.model_version}, "
            f"dim={report.dim}, history_len={report.history_len})",
            markup=False,
            soft_wrap=True,
        )
    else:
        console.print(f"{path} does not meet the FM contract:", markup=False, soft_wrap=True)
        for problem in report.problems:
            console.print(f"- {problem}", markup=False, highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)
