"""Cross-task transfer: the FM learns one label, every VM another, on the same rows."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from dataclasses import replace

from models.cross_task import summary_lines
from models.evaluate import evaluate_runs
from models.experiment import Impressions, SeedRun, run_seed
from tests.unit.test_models_train import TINY, taste_world

CROSS = replace(TINY, vm_user_features=True, kd_weights=(0.5,), kd_temperatures=(1.0,))


def _with_task(imps: Impressions) -> Impressions:
    """The VM task: engaged with an even item id (a subset of the FM's task, rarer)."""
    task = (imps.label.astype(bool) & (imps.item_id % 2 == 0)).astype(np.int8)
    return replace(imps, task_label=task)


@pytest.fixture(scope="module")
def imps() -> Impressions:
    return _with_task(taste_world())


@pytest.fixture(scope="module")
def run(imps: Impressions) -> SeedRun:
    return run_seed(imps, CROSS, seed=0)


def test_vms_learn_the_task_label_and_the_fm_the_source_label(
    imps: Impressions, run: SeedRun
) -> None:
    test = run.split.test
    vm_rate, fm_rate = imps.task_label[test].mean(), imps.label[test].mean()
    assert vm_rate < 0.7 * fm_rate
    # every VM is calibrated to its own task: mean prediction near the task's rate
    for key in ("vm", "vm_kd", "vm_solaris@0"):
        assert abs(run.test_probs[key].mean() - vm_rate) < 0.5 * abs(fm_rate - vm_rate), key
    # the source FM answers its own (more frequent) task; the reference FM the VMs' task
    assert run.test_probs["fm_source"].mean() > run.test_probs["fm"].mean() + 0.05


def test_report_is_judged_on_the_task_label(imps: Impressions, run: SeedRun) -> None:
    report = evaluate_runs("taste", imps, [run], CROSS)
    assert report["split"]["test_base_rate"] == pytest.approx(
        float(imps.task_label[run.split.test].mean())
    )
    assert "fm_source" in report["models"]
    from models.evaluate import markdown

    # the FM trained on the VM task clearly beats the VM here (gain interval above 0)
    assert report["fm_vm_gap"]["ci95"][0] > 0
    assert report["transfer_defined"] is True
    assert "TRANSFER UNDEFINED" not in markdown(report)
    assert report["transfer_ratio"]["kd"] is not None
    report["task"] = {
        "fm_task": {"label": "engaged"},
        "vm_task": {"label": "engaged, even item"},
        "vm_task_positive_share": 0.2,
    }
    lines = summary_lines(report)
    assert "VMs on engaged, even item" in lines[0] and lines[2].startswith("h ")


def test_a_one_class_task_is_refused_before_training() -> None:
    from models.data.errors import OneClassLabels

    imps = taste_world(n_users=40, per_user=10)
    with pytest.raises(OneClassLabels, match="VM training"):
        run_seed(replace(imps, task_label=np.zeros_like(imps.label)), TINY, seed=0)


def test_cross_task_with_the_engine_judges_the_engine_served_vm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With the serving engine (`solaris cross-task --engine`, the default) the served VM is the
    one trained on the tiers the engine achieves on the FM task's traffic, state tier included,
    as in `solaris evaluate`; before, cross-task judged only the offline tiers."""
    from models.cross_task import run_cross_task, write_pair_traffic
    from models.data.tasks import TaskPair
    from models.data.traffic import load_traffic
    from streams.settings import Settings
    from streams.simulate.served_tiers import EngineServedTiers
    from tests.integration.live_harness import TINY_TRAIN, small_traffic

    source = load_traffic(small_traffic(tmp_path / "source.avro", n_users=30, days=2.0))
    fm_imps = source.impressions
    vm_label = (fm_imps.label.astype(bool) & (fm_imps.item_id % 2 == 0)).astype(np.int8)
    meta = {"fm_task": {"name": "engaged"}, "vm_task": {"name": "even"}}
    meta |= {"fm_task_positive_share": 0.0, "vm_task_positive_share": float(vm_label.mean())}
    pair = TaskPair(fm_imps, vm_label, meta, source.requests)
    traffic = write_pair_traffic(pair, tmp_path / "pair.avro")
    settings = Settings().model_copy(
        update={"embedding_dim": TINY_TRAIN.embedding_dim, "history_len": TINY_TRAIN.history_len}
    )
    cfg = replace(TINY_TRAIN, kd_weights=(0.5,), kd_temperatures=(1.0,))
    report = run_cross_task(pair, "synthetic", cfg, None, EngineServedTiers(traffic, settings))
    assert report["beats_kd"]["served_model"] == "vm_solaris_engine"
    assert "vm_solaris_engine" in report["models"]
    assert report["task"]["vm_task"] == {"name": "even"}
    assert "beats_kd_state_tier" in report  # the state tier's own bar, as in evaluate
