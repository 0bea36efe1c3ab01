"""``solaris fm benchmark``: the FM as a sequential recommender beside a published SASRec.

Both are trained here on the same leave-last-out split of the same sequences and ranked over
every item (no sampled negatives); the JSON has an ``fm`` and a ``reference`` object, each with
``hr@10``, ``ndcg@10`` and ``train_seconds``, their difference, and the run's provenance.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from models.data.loaders import load_dataset
from models.seqrec.pretrain import K, PretrainConfig, Report, metrics, pretrain, rank_targets
from models.seqrec.reference import ReferenceConfig, run_reference
from models.seqrec.sequences import Sequences, from_interactions, split_points


def fm_figures(seqs: Sequences, cfg: PretrainConfig, report: Report | None) -> dict[str, Any]:
    """Pretrain the FM on the training steps and rank every user's last step."""
    trained = pretrain(seqs, cfg, report)
    _, test = split_points(seqs)
    t0 = time.monotonic()
    figures = metrics(rank_targets(trained.model, seqs, test, cfg.history_len))
    return figures | trained.summary() | {"rank_seconds": round(time.monotonic() - t0, 1)}


def benchmark(
    dataset: str,
    data_dir: Path,
    fm_cfg: PretrainConfig,
    ref_cfg: ReferenceConfig | None,
    report: Report | None = None,
) -> dict[str, Any]:
    """The yardstick's JSON (``ref_cfg`` None: the FM alone, no reference)."""
    from models.results import provenance

    started = provenance()  # the code that runs, not the tree at the end of a long run
    log, _ = load_dataset(dataset, data_dir)  # type: ignore[arg-type]
    seqs = from_interactions(log)
    out: dict[str, Any] = {
        "dataset": dataset,
        "data_dir": str(data_dir),
        "protocol": {
            "split": "leave-last-out per user: last step test, second-to-last validation",
            "ranking": "full: every item is a candidate, none excluded",
            "metrics": [f"hr@{K}", f"ndcg@{K}"],
            "users": len(seqs),
            "items": seqs.n_items - 2,
            "steps": seqs.steps,
        },
        "fm": fm_figures(seqs, fm_cfg, report),
    }
    if ref_cfg is not None:
        if report:
            report("training the reference SASRec (RecBole, its own environment)")
        out["reference"] = run_reference(seqs, ref_cfg, fm_cfg.threads) | {
            "settings": asdict(ref_cfg)
        }
        out["fm_minus_reference"] = {
            m: out["fm"][m] - out["reference"][m] for m in (f"hr@{K}", f"ndcg@{K}")
        }
    out["provenance"] = started | {"finished": provenance()["date"]}
    return out
