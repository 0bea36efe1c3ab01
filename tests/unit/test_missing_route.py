"""vm_solaris's missing tier goes to its frozen base VM only when validation says the base
scores those rows better (issue 22: +0.35 served TR on ml-100k, −0.007..0.010 NE elsewhere)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from models.experiment import VM, VM_SOLARIS_ENGINE  # noqa: E402
from models.runtime import TIER_EXACT, TIER_MISSING  # noqa: E402
from models.train_vm import VMData, missing_route, predict_vm, tune_vm  # noqa: E402
from models.vm import VerticalModel  # noqa: E402
from tests.unit.test_models_train import TINY  # noqa: E402

D, N = 4, 400


def _data(seed: int = 0) -> VMData:
    rng = np.random.default_rng(seed)
    tier = np.where(np.arange(N) % 2 == 0, TIER_EXACT, TIER_MISSING).astype(np.int64)
    views = rng.normal(size=(N, D)).astype(np.float32)  # what the FM would give every row
    emb = np.where((tier == TIER_MISSING)[:, None], 0.0, views).astype(np.float32)
    # exact rows: the label is in the embedding; missing rows: a coin
    label = np.where(tier == TIER_EXACT, emb[:, 0] > 0, rng.random(N) < 0.5).astype(np.int8)
    return VMData(
        rng.integers(0, 5, N).astype(np.int64),
        rng.integers(0, 5, N).astype(np.int64),
        np.zeros((N, 2), np.int64),
        label,
        teacher_logit=np.zeros(N, np.float32),
        tier_embeddings=np.repeat(views[:, None, :], 3, axis=1),
        tier_available=np.ones((N, 3), bool),
        served_tier=tier,
        served_embedding=emb,
    )


def _pair(own_bias: float) -> tuple[VerticalModel, VerticalModel]:
    """A solaris VM whose own missing-row score is pushed by ``own_bias`` and its base."""
    base = VerticalModel(5, 5, id_dim=2, hidden=(4,))
    model = VerticalModel(5, 5, id_dim=2, hidden=(4,), embedding_dim=D, base=base)
    with torch.no_grad():
        for p in (*base.parameters(), *model.parameters()):
            p.zero_()
        model.tier_scale.weight.zero_()
        model.mlp[-1].bias.fill_(own_bias)  # base scores 0.5 everywhere
    model.eval()
    return model, base


def test_route_chooses_the_lower_validation_logloss_on_missing_rows() -> None:
    valid = _data()
    confident, _ = _pair(own_bias=6.0)  # p ≈ 1 on coin-flip rows: far worse than 0.5
    assert missing_route(confident, VM_SOLARIS_ENGINE, valid, None) is True
    calibrated, _ = _pair(own_bias=0.0)
    calibrated.base.mlp[-1].bias.data.fill_(6.0)  # now the base is the overconfident one
    assert missing_route(calibrated, VM_SOLARIS_ENGINE, valid, None) is False
    plain = VerticalModel(5, 5, id_dim=2, hidden=(4,), embedding_dim=D)
    assert missing_route(plain, VM_SOLARIS_ENGINE, valid, None) is None  # no base


def test_routed_missing_rows_score_exactly_as_the_base_and_exact_rows_do_not() -> None:
    data = _data()
    model, base = _pair(own_bias=6.0)
    before = predict_vm(model, VM_SOLARIS_ENGINE, data, None)
    model.missing_to_base.fill_(True)
    after = predict_vm(model, VM_SOLARIS_ENGINE, data, None)
    plain = predict_vm(base, VM, data, None)
    missing = data.served_tier == TIER_MISSING
    np.testing.assert_allclose(after[missing], plain[missing], atol=1e-7)
    assert not np.allclose(before[missing], plain[missing], atol=1e-3)
    np.testing.assert_array_equal(after[~missing], before[~missing])


def test_exported_graph_carries_the_route(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from models.export import export_vm, vm_input_names
    from models.runtime import OnnxSession

    data = _data()
    model, base = _pair(own_bias=6.0)
    model.missing_to_base.fill_(True)
    path = tmp_path / "vm_solaris.onnx"
    export_vm(model, "vm_solaris", path, {"model_version": "t", "dim": str(D)})
    session = OnnxSession(path)
    assert session.metadata["baseline_on_missing"] == "1"
    values = (data.user, data.item, data.context, data.served_embedding, data.served_tier)
    got = session.run(dict(zip(vm_input_names(model), values, strict=True)))["prob"]
    np.testing.assert_allclose(got, predict_vm(model, VM_SOLARIS_ENGINE, data, None), atol=1e-5)
    missing = data.served_tier == TIER_MISSING
    np.testing.assert_allclose(got[missing], predict_vm(base, VM, data, None)[missing], atol=1e-5)


@pytest.mark.parametrize(("route", "expected"), [("own", False), ("baseline", True)])
def test_tune_vm_sets_the_configured_route(route: str, expected: bool) -> None:
    cfg = replace(TINY, vm_solaris_missing_route=route, vm_epochs=1)
    train, valid = _data(1), _data(2)
    base, _ = tune_vm(VM, cfg, 5, 5, train, valid, seed=0)
    spec = VM_SOLARIS_ENGINE
    model, gp = tune_vm(spec, cfg, 5, 5, train, valid, seed=0, base=base)
    assert bool(model.missing_to_base) is expected
    assert gp.missing_to_base is not None  # the validation verdict is recorded either way
