"""Cross-task transfer (issue 22 item 4): the FM learns one task, every VM another.

KD distils the FM's head, which answers the FM's task; the embedding carries what the FM read
from the history, whatever the question. So the ranker's VMs learn the *VM task* (``loved``,
``bought``) while the FM, its embeddings and the KD teacher come from the *FM task*
(``engaged``). The transfer ratio's 1.0 is an FM of the same shape trained on the VM task
(``fm``); the FM that is actually transferred is reported as ``fm_source``. Evaluation only:
nothing here is exported or served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.builder import json_safe, train_all
from models.config import TrainConfig
from models.data.tasks import TaskPair
from models.evaluate import evaluate_runs
from models.experiment import Impressions
from models.served import ServedTierSource
from models.train import Report


def cross_task_impressions(pair: TaskPair) -> Impressions:
    """The experiment's table: the FM task's labels in ``label``, the VM task's in ``task_label``."""
    return Impressions.from_columns(pair.impressions, task_label=pair.vm_label)


def run_cross_task(
    pair: TaskPair,
    dataset: str,
    cfg: TrainConfig,
    report: Report | None = None,
    served: ServedTierSource | None = None,
) -> dict[str, Any]:
    """Train and evaluate every model on ``pair``; the report of ``models.evaluate`` plus a
    ``task`` block naming both tasks, the reference FM and the source FM's NE on the VM task.
    With ``served`` (the serving engine over :func:`write_pair_traffic`'s file) the served VM is
    the engine-built one, state tier included, as in ``solaris evaluate``."""
    imps = cross_task_impressions(pair)
    runs = train_all(imps, cfg, report, served)
    out = evaluate_runs(dataset, imps, runs, cfg)
    models = out["models"]
    out["task"] = {
        "fm_task": pair.metadata["fm_task"],
        "vm_task": pair.metadata["vm_task"],
        "fm_task_positive_share": pair.metadata["fm_task_positive_share"],
        "vm_task_positive_share": pair.metadata["vm_task_positive_share"],
        "reference": "fm = an FM of the same shape trained on the VM task (the TR's 1.0)",
        "source": "fm_source = the FM trained on the FM task, scored on the VM task; its "
        "embeddings feed vm_solaris and its head teaches vm_kd",
        "ne_source_minus_vm": models["fm_source"]["ne"] - models["vm"]["ne"],
    }
    out["conversion"] = pair.metadata
    return json_safe(out)


def write_pair_traffic(pair: TaskPair, path: Path) -> Path:
    """The FM task's traffic (requests and labelled impressions: what the live pipeline would
    see, the FM reading its own task's labels in the history) as a traffic file at ``path``."""
    from models.data.columns import iter_events
    from models.data.traffic import write_traffic

    if pair.requests is None:
        raise ValueError("the task pair has no requests: convert it with task_impressions")
    write_traffic(path, iter_events(pair.requests, pair.impressions), json_safe(pair.metadata))
    return path


def _f(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def summary_lines(report: dict[str, Any]) -> list[str]:
    """A few lines for a terminal: the task pair, the bar against KD, the key TRs."""
    task, bar = report["task"], report["beats_kd"]
    tr = report["transfer_ratio"]
    lo, hi = bar["ne_kd_minus_served_ci95"]
    defined = report.get("transfer_defined") is not False

    def ratio(x: float | None) -> str:  # TRs and h divide by the FM's gain over the VM
        return _f(x) if defined else "undefined"

    return [
        f"{report['dataset']}: FM on {task['fm_task']['label']}, VMs on "
        f"{task['vm_task']['label']} (positives {task['vm_task_positive_share']:.3f})",
        f"TR kd {ratio(tr.get('kd'))} | solaris exact {ratio(tr.get('solaris'))} | served "
        f"{ratio(bar['tr_served'])} ({bar['served_model']})",
        f"h {ratio(bar['headroom_closure'])}; NE(kd) - NE(served) "
        f"{_f(bar['ne_kd_minus_served'], '+.4f')} [{_f(lo, '+.4f')}, {_f(hi, '+.4f')}]; "
        f"FM gain {bar['fm_gain']}",
    ]
