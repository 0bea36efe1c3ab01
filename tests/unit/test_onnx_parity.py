"""ONNX graphs give the torch models' outputs (within 1e-4 abs) at any batch size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from models.export import OPSET, export_fm, export_vm  # noqa: E402
from models.features import HistoryIndex, Vocab, fm_inputs  # noqa: E402
from models.fm import FoundationModel  # noqa: E402
from models.runtime import FMRunner, OnnxSession, UserHistory  # noqa: E402
from models.vm import VerticalModel  # noqa: E402

L = 6
ATOL = 1e-4


def _jitter(module: torch.nn.Module, seed: int = 0) -> None:
    """Random, non-trivial weights: parity must hold for any parameters, not just init."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))


def _fm_batch(b: int, n_items: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, L + 1, b)
    lengths[0] = 0  # an empty history (new user)
    mask = np.arange(L)[None, :] >= (L - lengths)[:, None]
    return {
        "target_item": rng.integers(1, n_items, b),
        "hist_item": np.where(mask, rng.integers(1, n_items, (b, L)), 0),
        "hist_label": np.where(mask, rng.integers(1, 3, (b, L)), 0),
        "hist_gap": np.where(mask, rng.integers(1, 11, (b, L)), 0),
    }


@pytest.fixture(scope="module")
def fm_model() -> FoundationModel:
    torch.manual_seed(0)
    model = FoundationModel(40, item_dim=8, hidden=16, dim=12, heads=2)
    _jitter(model)
    return model.eval()


def test_fm_onnx_matches_torch(tmp_path: Path, fm_model: FoundationModel) -> None:
    path = export_fm(fm_model, L, tmp_path / "fm.onnx", {"model_version": "v-test"})
    session = OnnxSession(path)
    assert session.metadata["model_version"] == "v-test"
    assert session.metadata["opset"] == str(OPSET)
    for b in (1, 37):  # dynamic batch axis
        batch = _fm_batch(b, 40, seed=b)
        out = session.run(batch)
        with torch.no_grad():
            emb, logit = fm_model(**{k: torch.from_numpy(v) for k, v in batch.items()})
        assert out["embedding"].shape == (b, 12)
        np.testing.assert_allclose(out["embedding"], emb.numpy(), atol=ATOL)
        np.testing.assert_allclose(out["logit"], logit.numpy(), atol=ATOL)


@pytest.mark.parametrize("embedding_dim", [0, 12])
def test_vm_onnx_matches_torch(tmp_path: Path, embedding_dim: int) -> None:
    torch.manual_seed(1)
    vm = VerticalModel(20, 30, id_dim=4, hidden=(8,), embedding_dim=embedding_dim)
    _jitter(vm, seed=1)
    vm.eval()
    name = "vm_solaris" if embedding_dim else "vm"
    session = OnnxSession(export_vm(vm, name, tmp_path / f"{name}.onnx", {"model_version": "v"}))
    rng = np.random.default_rng(2)
    b = 25
    inputs = {
        "user": rng.integers(0, 20, b),
        "item": rng.integers(0, 30, b),
        "context": np.stack([rng.integers(0, 24, b), rng.integers(0, 7, b)], axis=1),
    }
    if embedding_dim:
        inputs["embedding"] = rng.normal(size=(b, embedding_dim)).astype(np.float32)
        inputs["tier"] = rng.integers(0, 4, b)
    prob = session.run(inputs)["prob"]
    with torch.no_grad():
        ref = torch.sigmoid(vm(**{k: torch.from_numpy(v) for k, v in inputs.items()}))
    np.testing.assert_allclose(prob, ref.numpy(), atol=ATOL)


def test_fm_runner_matches_offline_features(tmp_path: Path, fm_model: FoundationModel) -> None:
    """Serving path (UserHistory → FMRunner) == training path (HistoryIndex → torch)."""
    rng = np.random.default_rng(5)
    n = 300
    users = rng.integers(1, 8, n).astype(np.int64)
    items = rng.integers(100, 160, n).astype(np.int64)
    labels = rng.integers(0, 2, n).astype(np.int8)
    times = np.sort(rng.integers(0, 100_000_000, n)).astype(np.int64)
    vocab = Vocab.build(np.arange(100, 137))  # 37 known + pad + OOV = 39 < 40 rows
    q_users = np.arange(1, 8, dtype=np.int64)
    q_items = rng.integers(100, 170, 7).astype(np.int64)
    q_times = np.full(7, 60_000_000, np.int64)
    index = HistoryIndex(users, items, labels, times)
    offline = fm_inputs(vocab, q_items, q_times, index.gather(q_users, q_times, L))
    with torch.no_grad():
        emb, logit = fm_model(**{k: torch.from_numpy(v) for k, v in offline.items()})
    session = OnnxSession(export_fm(fm_model, L, tmp_path / "fm.onnx", {"model_version": "v"}))
    runner = FMRunner(session, vocab, L, "v", 12)
    hists = [UserHistory(items[users == u], labels[users == u], times[users == u]) for u in q_users]
    r_emb, r_logit = runner.embed(q_users, q_items, q_times, hists)
    np.testing.assert_allclose(r_emb, emb.numpy(), atol=ATOL)
    np.testing.assert_allclose(r_logit, logit.numpy(), atol=ATOL)


def _whole_and_split(tmp_path: Path, fm_model: FoundationModel) -> tuple[Any, Any]:
    """The FM exported whole (``FMRunner``) and split (``StateRunner``), on one vocabulary."""
    from models.export import export_fm_split
    from models.runtime import StateRunner

    vocab = Vocab.build(np.arange(1, 39))
    meta = {"model_version": "v-test"}
    full = FMRunner(
        OnnxSession(export_fm(fm_model, L, tmp_path / "fm.onnx", meta)), vocab, L, "v", 12
    )
    state_path, decode_path = export_fm_split(fm_model, L, tmp_path, meta)
    split = StateRunner(OnnxSession(state_path), OnnxSession(decode_path), vocab, L, 12)
    return full, split


def test_split_fm_decodes_a_stored_state_to_the_fms_output(
    tmp_path: Path, fm_model: FoundationModel
) -> None:
    """Issue 22's state tier: state at t, decoded for any item, equals the whole FM at t."""
    full, split = _whole_and_split(tmp_path, fm_model)
    rng = np.random.default_rng(5)
    hists = [UserHistory.empty()] + [
        UserHistory.of(
            rng.integers(1, 45, k).tolist(),  # some ids outside the vocabulary (OOV)
            rng.integers(0, 2, k).tolist(),
            np.sort(rng.integers(0, 10_000_000, k)).tolist(),
        )
        for k in (1, 3, 6, 9, 14)
    ]
    times = np.array([5_000_000] * len(hists), np.int64)
    states = split.states(times, hists)
    assert states.shape == (len(hists), split.width)
    for items in (np.arange(1, 1 + len(hists)), np.full(len(hists), 44)):
        emb, logit = split.decode(items, states)
        want_emb, want_logit = full.embed(np.zeros(len(hists), np.int64), items, times, hists)
        np.testing.assert_allclose(emb, want_emb, atol=ATOL)
        np.testing.assert_allclose(logit, want_logit, atol=ATOL)


def test_embedder_with_the_split_fm_equals_the_whole_fm_per_pair(
    tmp_path: Path, fm_model: FoundationModel
) -> None:
    """The FM worker embeds verified messages with the split FM: one history encoding per
    message, the FM's head per pair. The stored vectors equal the whole FM's per pair."""
    from schemas.records import ProposalBatch
    from streams.engine.embedder import Embedder

    full, split = _whole_and_split(tmp_path, fm_model)
    rng = np.random.default_rng(6)
    batches, hists = [], []
    for m, k in enumerate((0, 2, 5, 11)):
        h = UserHistory.of(
            rng.integers(1, 45, k).tolist(),
            rng.integers(0, 2, k).tolist(),
            np.sort(rng.integers(0, 1_000_000, k)).tolist(),
        )
        items = tuple(int(i) for i in rng.integers(1, 45, 3 + m))
        batches.append(ProposalBatch(f"r{m}", m, 2_000_000, 50, items, ("c",) * len(items)))
        hists.append(h)
    calls: list[int] = []
    states = split.states

    def counted(times: np.ndarray, histories: list[UserHistory]) -> np.ndarray:
        calls.append(len(histories))
        return states(times, histories)

    split.states = counted  # type: ignore[method-assign]
    via_split = Embedder(full, split=split).embed_messages(batches, hists)
    whole = Embedder(full).embed_messages(batches, hists)
    assert calls == [len(batches)]  # one history encoding per message, not per pair
    assert [(e.user_id, e.item_id) for e in via_split] == [(e.user_id, e.item_id) for e in whole]
    a = np.stack([e.array() for e in via_split])
    b = np.stack([e.array() for e in whole])
    np.testing.assert_allclose(a, b, atol=2e-3)  # float16 storage of equal float32 outputs
