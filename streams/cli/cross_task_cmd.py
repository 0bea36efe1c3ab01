"""``solaris cross-task``: the FM learns one task, the VMs another (issue 22 item 4).

Evaluation only (nothing exported): converts the dataset under both tasks, trains the FM on
``--fm-task`` and every VM on ``--vm-task``, and prints/writes the report of
``models.cross_task``. torch is imported only when it runs.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streams.cli.train_cmd import DataDirOpt, SeedsOpt
from streams.logs import fail
from streams.settings import Settings

console = Console()


def cross_task(
    dataset: Annotated[str, typer.Option("--dataset", help="movielens or taobao.")],
    vm_task: Annotated[
        str, typer.Option("--vm-task", help="The VMs' label rule: loved (movielens), bought.")
    ],
    fm_task: Annotated[
        str, typer.Option("--fm-task", help="The FM's label rule (default: engaged).")
    ] = "engaged",
    data_dir: DataDirOpt = None,
    seeds: SeedsOpt = 3,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    engine: Annotated[
        bool,
        typer.Option(
            "--engine/--no-engine",
            help="Train and judge the served VM on the tiers the serving engine achieves on the "
            "FM task's traffic (state tier included), as `solaris evaluate` does; off: offline "
            "tiers only (SOLARIS_TRAIN_ON_ENGINE_TIERS=false also turns it off).",
        ),
    ] = True,
) -> None:
    """Cross-task transfer: TR per task pair against an FM trained on the VMs' task."""
    from models.config import TrainConfig
    from models.cross_task import run_cross_task, summary_lines
    from models.data.errors import DataError
    from models.data.loaders import resolve_data_dir
    from models.data.tasks import task_impressions
    from models.evaluate import markdown

    settings = Settings()
    started = time.perf_counter()
    try:
        folder = resolve_data_dir(data_dir, settings.data_dir)
        with console.status(f"converting {dataset} for tasks {fm_task} and {vm_task}"):
            pair = task_impressions(dataset, folder, fm_task, vm_task)
        cfg = TrainConfig.from_settings(settings, seeds=seeds)
        with tempfile.TemporaryDirectory(prefix="solaris-cross-task-") as tmp:
            served = None
            if engine:
                from models.cross_task import write_pair_traffic
                from streams.simulate.served_tiers import served_source

                traffic = write_pair_traffic(pair, Path(tmp) / "traffic.avro")
                served = served_source(traffic, settings)
            report = run_cross_task(pair, dataset, cfg, lambda msg: console.log(msg), served)
    except DataError as exc:  # ConfigError is a DataError: an unknown task, a missing folder
        fail(f"{type(exc).__name__}: {exc}", console=console)
        raise typer.Exit(1) from exc
    console.print(markdown(report), markup=False, highlight=False, soft_wrap=True)
    for line in summary_lines(report):
        console.print(line, markup=False, highlight=False)
    console.print(f"{time.perf_counter() - started:.0f} s")
    if json_path is not None:
        from models.results import provenance

        report["provenance"] = provenance()
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {json_path}")


def register(app: typer.Typer) -> None:
    """Add ``cross-task`` to the root ``solaris`` app."""
    app.command("cross-task")(cross_task)
