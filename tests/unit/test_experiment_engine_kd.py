"""Issue 22: the engine-built VM trained with the KD loss as well gets vm_kd's KD budget (every
KD weight × temperature at the optimiser point vm_solaris won) and falls back to vm_kd."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import models.experiment as experiment
from models.experiment import SeedRun, run_seed
from models.runtime import TIER_AGGREGATE, TIER_EXACT, TIER_MISSING
from models.served import RowKeys, ServedRows, TrainedModels
from models.split import TimeSplit
from tests.unit.test_models_train import TINY, taste_world

CFG = replace(TINY, vm_user_features=True, kd_weights=(0.3, 0.7), kd_temperatures=(1.0, 2.0))
WORLD = taste_world(120, 30)


class FakeEngine:
    """Serves a fixed pseudo-random tier mix with random vectors (the plumbing, not the engine)."""

    cache_key = "fake"

    def __call__(self, models: TrainedModels, split: TimeSplit, rows: RowKeys) -> ServedRows:
        rng = np.random.default_rng(7)
        n = len(rows.user)
        tier = rng.choice([TIER_EXACT, TIER_AGGREGATE, TIER_MISSING], n).astype(np.int64)
        vector = rng.normal(0, 1, (n, models.dim)).astype(np.float32)
        vector[tier == TIER_MISSING] = 0.0
        shares = {str(t): float(np.mean(tier == t)) for t in np.unique(tier)}
        return ServedRows(tier, vector, np.ones(n, bool), shares)


@pytest.fixture(scope="module")
def recorded() -> tuple[SeedRun, dict[str, Any]]:
    calls: dict[str, Any] = {}
    real = experiment.tune_vm

    def spy(spec, cfg, n_users, n_items, train, valid, seed, fixed, head, candidates, base):  # type: ignore[no-untyped-def]
        calls[spec.name] = {"candidates": candidates, "fixed": fixed, "base": base}
        return real(spec, cfg, n_users, n_items, train, valid, seed, fixed, head, candidates, base)

    mp = pytest.MonkeyPatch()
    mp.setattr(experiment, "tune_vm", spy)
    try:
        run = run_seed(WORLD, CFG, seed=0, engine_tiers=FakeEngine())
    finally:
        mp.undo()
    return run, calls


def test_engine_kd_is_tuned_on_the_kd_grid_at_vm_solaris_point(
    recorded: tuple[SeedRun, dict[str, Any]],
) -> None:
    run, calls = recorded
    got = calls["vm_solaris_engine_kd"]["candidates"]
    kd = calls["vm_kd"]["candidates"]
    assert got is not None and len(kd) == 4 and len(got) == len(kd) + 1  # vm_kd's budget + 0
    assert {(g.kd_weight, g.kd_temperature) for g in got} == {
        (w, t) for w in CFG.kd_weights for t in CFG.kd_temperatures
    } | {(0.0, 1.0)}  # weight 0: it may choose not to distil (its worst case: no KD loss)
    sol = run.tuned["vm_solaris@0"]
    assert all(
        (g.lr, g.weight_decay, g.id_dropout) == (sol.lr, sol.weight_decay, sol.id_dropout)
        for g in got
    )
    # the chosen KD point is what `tuned` (the JSON's "tuned") records
    chosen = run.tuned["vm_solaris_engine_kd"]
    assert (chosen.kd_weight, chosen.kd_temperature) in {
        (g.kd_weight, g.kd_temperature) for g in got
    }


def test_engine_kd_falls_back_to_vm_kd(recorded: tuple[SeedRun, dict[str, Any]]) -> None:
    run, calls = recorded
    assert calls["vm_solaris_engine_kd"]["base"] is run.vms["vm_kd"]
    assert calls["vm_solaris_engine"]["base"] is run.vms["vm"]
    # with every input unavailable it scores exactly as vm_kd
    np.testing.assert_allclose(
        run.test_probs["vm_solaris_engine_kd_unavailable"], run.test_probs["vm_kd"], atol=1e-6
    )
    assert run.test_probs["vm_solaris_engine_kd_missing"].shape == run.test_probs["vm_kd"].shape


def test_the_blend_is_fitted_on_validation_and_scores_the_test_rows(
    recorded: tuple[SeedRun, dict[str, Any]],
) -> None:
    """vm_solaris_engine_blend = σ(w·z_engine + (1 − w)·z_kd), w chosen on the VMs' validation
    rows and applied to each outage variant too."""
    from models.blend import WEIGHTS

    run, _ = recorded
    blend = run.blends["vm_solaris_engine_blend"]
    p = run.test_probs
    for suffix in ("", "_missing", "_unavailable"):
        np.testing.assert_allclose(
            p[f"vm_solaris_engine_blend{suffix}"],
            blend.prob(p[f"vm_solaris_engine{suffix}"], p["vm_kd"]),
            rtol=1e-6,
        )
    assert blend.a in WEIGHTS and blend.a + blend.b == pytest.approx(1.0) and blend.c == 0.0


def test_later_seeds_reuse_the_chosen_kd_point(recorded: tuple[SeedRun, dict[str, Any]]) -> None:
    run, _ = recorded
    calls: dict[str, Any] = {}
    real = experiment.tune_vm

    def spy(spec, cfg, n_users, n_items, train, valid, seed, fixed, head, candidates, base):  # type: ignore[no-untyped-def]
        calls[spec.name] = fixed
        return real(spec, cfg, n_users, n_items, train, valid, seed, fixed, head, candidates, base)

    mp = pytest.MonkeyPatch()
    mp.setattr(experiment, "tune_vm", spy)
    try:
        again = run_seed(taste_world(120, 30), CFG, 1, run.tuned, engine_tiers=FakeEngine())
    finally:
        mp.undo()
    assert calls["vm_solaris_engine_kd"] == run.tuned["vm_solaris_engine_kd"]
    assert (
        again.tuned["vm_solaris_engine_kd"].kd_weight == run.tuned["vm_solaris_engine_kd"].kd_weight
    )


#: the test rows the bundle tests score
ROWS = 48


def _bundle(run: SeedRun, kd: str, path: Path) -> tuple[dict[str, Any], Any]:
    """Write ``run`` as a bundle with ``vm_solaris_kd`` = ``kd``; its meta.json and the loaded
    bundle."""
    import json

    from models.builder import write_bundle
    from models.bundle import load_bundle

    cfg = replace(CFG, vm_solaris_kd=kd)
    write_bundle([run], {"models": {}, "transfer_ratio": {}}, cfg, path, kd[0] * 20, {})
    return json.loads((path / "meta.json").read_text()), load_bundle(path)


def _rows(run: SeedRun) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any]]:
    """Users, items, times and whole histories of the first test rows (what the ONNX scorer
    takes)."""
    from tests.unit.test_fair_vm import whole_histories

    rows = run.split.test[:ROWS]
    users = WORLD.user_id[rows]
    return users, WORLD.item_id[rows], WORLD.event_time_ms[rows], whole_histories(WORLD, users)


def _torch_inputs(run: SeedRun) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The same rows as torch inputs: (user, item, context) and the streaming user features
    the training side computes."""
    import torch

    from models.features import HistoryIndex, context_features
    from models.user_features import user_stream_inputs

    users, items, times, _ = _rows(run)
    index = HistoryIndex(WORLD.user_id, WORLD.item_id, WORLD.label, WORLD.event_time_ms)
    feats = user_stream_inputs(
        run.item_vocab, items, times, index.gather(users, times, CFG.history_len)
    )
    ids = (
        torch.from_numpy(run.user_vocab.lookup(users)),
        torch.from_numpy(run.item_vocab.lookup(items)),
        torch.from_numpy(context_features(times)),
    )
    return ids, {k: torch.from_numpy(feats[k]) for k in ("user_stats", "recent_pos")}


def test_bundle_with_kd_ships_the_combined_vm_whose_outage_scores_as_vm_kd(
    recorded: tuple[SeedRun, dict[str, Any]], tmp_path: Path
) -> None:
    """``vm_solaris_kd`` "loss": vm_solaris.onnx is vm_solaris_engine_kd, and with every input
    unavailable it scores exactly as the torch vm_kd (its in-graph baseline)."""
    import torch

    from models.runtime import TIER_UNAVAILABLE

    run, _ = recorded
    meta, bundle = _bundle(run, "loss", tmp_path)
    users, items, times, hists = _rows(run)
    tiers = np.full(ROWS, TIER_UNAVAILABLE, np.int64)
    emb = np.zeros((ROWS, CFG.embedding_dim), np.float32)
    served = bundle.solaris.score(users, items, times, emb, tiers, hists)
    ids, stream = _torch_inputs(run)
    with torch.no_grad():
        z = run.vms["vm_kd"].eval()(*ids, **stream)
    np.testing.assert_allclose(served, torch.sigmoid(z).numpy(), atol=1e-5)
    assert meta["vm_solaris_is"] == "vm_solaris_engine_kd"
    assert meta["vm_solaris_grid_point"] == vars(run.tuned["vm_solaris_engine_kd"])
    assert CFG.vm_solaris_kd == "blend"  # the default


def test_bundle_with_the_blend_ships_one_graph_scoring_as_the_blended_torch_models(
    recorded: tuple[SeedRun, dict[str, Any]], tmp_path: Path
) -> None:
    """``vm_solaris_kd`` "blend": vm_solaris.onnx scores every row (a served tier and a store
    outage alike) as σ(a·z_engine + b·z_kd + c) of the torch models, same inputs as before."""
    import torch

    from models.runtime import TIER_EXACT, TIER_UNAVAILABLE

    run, _ = recorded
    blend = run.blends["vm_solaris_engine_blend"]
    meta, bundle = _bundle(run, "blend", tmp_path)
    assert meta["vm_solaris_is"] == "vm_solaris_engine_blend"
    assert meta["vm_solaris_blend"] == vars(blend)
    users, items, times, hists = _rows(run)
    emb = np.random.default_rng(5).normal(0, 1, (ROWS, CFG.embedding_dim)).astype(np.float32)
    ids, stream = _torch_inputs(run)
    for tier in (TIER_EXACT, TIER_UNAVAILABLE):
        tiers = np.full(ROWS, tier, np.int64)
        served = bundle.solaris.score(users, items, times, emb, tiers, hists)
        with torch.no_grad():
            z_engine = run.vms["vm_solaris_engine"].eval()(
                *ids, embedding=torch.from_numpy(emb), tier=torch.from_numpy(tiers), **stream
            )
            z_kd = run.vms["vm_kd"].eval()(*ids, **stream)
        want = blend.prob(torch.sigmoid(z_engine).numpy(), torch.sigmoid(z_kd).numpy())
        np.testing.assert_allclose(served, want, atol=2e-5)
