"""``solaris fm benchmark``: the FM as a sequential recommender, beside a published SASRec."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from streams.logs import announce

app = typer.Typer(
    help="The foundation model on its own: external yardsticks.", no_args_is_help=True
)


@app.command("benchmark")
def benchmark_cmd(
    dataset: Annotated[
        str, typer.Option(help="movielens (any MovieLens layout) or taobao.")
    ] = "movielens",
    data_dir: Annotated[Path, typer.Option(help="Folder (or file) of the interaction log.")] = Path(
        "../shared/data"
    ),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here.")] = None,
    history_len: Annotated[int, typer.Option(help="Steps of history the FM reads.")] = 200,
    layers: Annotated[int, typer.Option(help="The FM's self-attention blocks.")] = 2,
    item_dim: Annotated[int, typer.Option(help="The FM's token width.")] = 64,
    heads: Annotated[int, typer.Option(help="Attention heads.")] = 2,
    max_epochs: Annotated[int, typer.Option(help="Most pretraining epochs.")] = 200,
    patience: Annotated[int, typer.Option(help="Epochs without a better validation NDCG@10.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of both trainings.")] = 0,
    threads: Annotated[int, typer.Option(help="torch threads of each training.")] = 2,
    reference: Annotated[
        bool, typer.Option(help="Also train RecBole's SASRec on the same split (own venv).")
    ] = True,
    reference_max_len: Annotated[int, typer.Option(help="The reference's history length.")] = 50,
    reference_epochs: Annotated[
        int, typer.Option(help="Most epochs of the reference (RecBole's default 300).")
    ] = 300,
) -> None:
    """Train the FM with its next-interaction objective and a reference SASRec on the same
    leave-last-out split; report HR@10 and NDCG@10 over every item, and training time."""
    from models.seqrec.benchmark import benchmark
    from models.seqrec.pretrain import PretrainConfig
    from models.seqrec.reference import ReferenceConfig

    fm_cfg = PretrainConfig(
        history_len=history_len,
        item_dim=item_dim,
        layers=layers,
        heads=heads,
        max_epochs=max_epochs,
        patience=patience,
        seed=seed,
        threads=threads,
    )
    ref_cfg = (
        ReferenceConfig(max_len=reference_max_len, epochs=reference_epochs, seed=seed)
        if reference
        else None
    )
    out = benchmark(dataset, data_dir, fm_cfg, ref_cfg, report=announce)
    out["provenance"]["command"] = " ".join(["solaris", *sys.argv[1:]])
    text = json.dumps(out, indent=2)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(text + "\n")
    fm, ref = out["fm"], out.get("reference")
    line = f"FM HR@10 {fm['hr@10']:.4f} NDCG@10 {fm['ndcg@10']:.4f} ({fm['train_seconds']} s)"
    if ref is not None:
        line += f"; SASRec HR@10 {ref['hr@10']:.4f} NDCG@10 {ref['ndcg@10']:.4f} ({ref['train_seconds']} s)"
    typer.echo(line)
