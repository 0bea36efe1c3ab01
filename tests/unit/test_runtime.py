"""The serving contract of models.runtime / models.bundle: shapes, dtypes, validation, caching."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.bundle import FILES, bundle_key, ensure_bundle, load_bundle
from models.config import TrainConfig
from models.errors import BundleError, InferenceError, InputError
from models.providers import CPU
from models.runtime import (
    TIER_AGGREGATE,
    TIER_EXACT,
    TIER_MISSING,
    TIER_NAMES,
    TIER_NEIGHBOUR_AGGREGATE,
    TIER_NEIGHBOUR_ITEM,
    TIER_STATE,
    UserHistory,
)

DIM = 8
L = 5


def _write_bundle(root: Path, version: str = "v-test") -> Path:
    """A bundle of untrained (jittered) models: enough for the contract, no training."""
    torch = pytest.importorskip("torch")
    from models.export import export_fm, export_vm
    from models.fm import FoundationModel
    from models.vm import VerticalModel

    torch.manual_seed(0)
    fm = FoundationModel(12, item_dim=8, hidden=16, dim=DIM, heads=2).eval()
    vm = VerticalModel(7, 12, id_dim=4, hidden=(8,)).eval()
    sol = VerticalModel(7, 12, id_dim=4, hidden=(8,), embedding_dim=DIM).eval()
    with torch.no_grad():
        for p in sol.parameters():
            p.add_(0.5 * torch.randn(p.shape))
    root.mkdir(parents=True, exist_ok=True)
    props = {"model_version": version}
    export_fm(fm, L, root / "fm.onnx", props)
    export_vm(vm, "vm", root / "vm.onnx", props)
    export_vm(sol, "vm_solaris", root / "vm_solaris.onnx", props)
    np.savez(
        root / "vocab.npz",
        fm_items=np.arange(100, 110, dtype=np.int64),
        vm_users=np.array([1, 2, 3, 4, 5], np.int64),
        vm_items=np.arange(100, 110, dtype=np.int64),
    )
    meta = {
        "model_version": version,
        "dim": DIM,
        "history_len": L,
        "dataset": "test",
        "serving_lag_ms": 600_000,
        "metrics": {},
    }
    (root / "meta.json").write_text(json.dumps(meta))
    return root


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_bundle(tmp_path_factory.mktemp("bundle"))


def test_tier_codes_are_the_documented_numbering() -> None:
    from store.tiers import TIER_NAMES as STORE_TIER_NAMES
    from store.tiers import Tier

    codes = (
        TIER_EXACT,
        TIER_AGGREGATE,
        TIER_NEIGHBOUR_ITEM,
        TIER_NEIGHBOUR_AGGREGATE,
        TIER_STATE,
        TIER_MISSING,
    )
    assert codes == (0, 1, 2, 3, 4, 5) == tuple(Tier)
    assert TIER_NAMES == STORE_TIER_NAMES  # models and store agree on the numbering


def test_runtime_and_bundle_do_not_import_torch() -> None:
    code = "import sys, models.bundle, models.runtime; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_runner_shapes_and_dtypes(bundle_dir: Path) -> None:
    b = load_bundle(bundle_dir)
    assert b.meta.model_version == b.fm.model_version == "v-test"
    assert b.fm.dim == DIM
    assert b.fm.session.provider == CPU or b.fm.session.provider.endswith("ExecutionProvider")
    users = np.array([1, 2, 99], np.int64)
    items = np.array([100, 105, 999], np.int64)  # 999: out of vocabulary
    times = np.array([5_000, 6_000, 7_000], np.int64)
    hists = [
        UserHistory.of([101, 102, 103], [1, 0, 1], [1_000, 2_000, 3_000]),
        UserHistory.empty(),
        UserHistory.of([104] * 9, [1] * 9, list(range(9))),  # longer than L
    ]
    emb, logit = b.fm.embed(users, items, times, hists)
    assert emb.dtype == np.float32 and emb.shape == (3, DIM)
    assert logit.dtype == np.float32 and logit.shape == (3,)
    p = b.vm.score(users, items, times)
    assert p.dtype == np.float32 and p.shape == (3,) and ((p > 0) & (p < 1)).all()
    tiers = np.array([TIER_EXACT, TIER_AGGREGATE, TIER_MISSING], np.uint8)
    q = b.solaris.score(users, items, times, emb, tiers)
    assert q.dtype == np.float32 and q.shape == (3,) and ((q > 0) & (q < 1)).all()
    e0, z0 = b.fm.embed(users[:0], items[:0], times[:0], [])
    assert e0.shape == (0, DIM) and z0.shape == (0,)
    assert b.vm.score(users[:0], items[:0], times[:0]).shape == (0,)


def test_history_is_cut_strictly_before_the_event_time(bundle_dir: Path) -> None:
    b = load_bundle(bundle_dir)
    past = UserHistory.of([101, 102], [1, 1], [1_000, 2_000])
    with_future = UserHistory.of([101, 102, 107, 108], [1, 1, 0, 0], [1_000, 2_000, 5_000, 9_000])
    args = (np.array([1]), np.array([103]), np.array([5_000]))
    e1, z1 = b.fm.embed(*args, [past])
    e2, z2 = b.fm.embed(*args, [with_future])
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(z1, z2)


def test_missing_tier_ignores_the_embedding(bundle_dir: Path) -> None:
    b = load_bundle(bundle_dir)
    rng = np.random.default_rng(0)
    args = (np.array([1, 2]), np.array([100, 101]), np.array([0, 0]))
    miss = np.full(2, TIER_MISSING, np.uint8)
    a = b.solaris.score(*args, rng.normal(size=(2, DIM)).astype(np.float32), miss)
    z = b.solaris.score(*args, np.zeros((2, DIM), np.float32), miss)
    np.testing.assert_array_equal(a, z)
    exact = np.full(2, TIER_EXACT, np.uint8)
    e = b.solaris.score(*args, rng.normal(size=(2, DIM)).astype(np.float32), exact)
    assert not np.allclose(e, z)


def test_bad_inputs_raise_input_error(bundle_dir: Path) -> None:
    b = load_bundle(bundle_dir)
    u, i, t = np.array([1, 2]), np.array([100, 101]), np.array([0, 0])
    with pytest.raises(InputError):
        b.vm.score(u, i[:1], t)
    with pytest.raises(InputError):
        b.fm.embed(u, i, t, [UserHistory.empty()])
    with pytest.raises(InputError):
        b.solaris.score(u, i, t, np.zeros((2, DIM + 1), np.float32), np.zeros(2, np.uint8))
    with pytest.raises(InputError):  # 6 is TIER_UNAVAILABLE (the store unread); 7 is nothing
        b.solaris.score(u, i, t, np.zeros((2, DIM), np.float32), np.array([0, 7]))
    with pytest.raises(InputError):
        UserHistory.of([1, 2], [1, 1], [5, 4])  # not oldest first
    with pytest.raises(InputError):
        UserHistory(np.zeros(2, np.int64), np.zeros(3, np.int8), np.zeros(2, np.int64))


def test_load_bundle_rejects_incomplete_or_inconsistent_dirs(tmp_path: Path) -> None:
    with pytest.raises(BundleError):
        load_bundle(tmp_path)
    root = _write_bundle(tmp_path / "b")
    meta = json.loads((root / "meta.json").read_text())
    meta["model_version"] = "other"
    (root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="version"):
        load_bundle(root)


def test_ensure_bundle_trains_once_per_traffic_and_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import models.builder

    calls: list[Path] = []

    def fake_build(
        traffic: Path, cfg: TrainConfig, out: Path, key: str, report: object, served: object
    ) -> dict:
        calls.append(out)
        _write_bundle(out, version=f"v-{key[:6]}")
        return {}

    monkeypatch.setattr(models.builder, "build_bundle", fake_build)
    traffic = tmp_path / "t.avro"
    traffic.write_bytes(b"traffic-a")
    cfg = TrainConfig(seeds=1)
    first = ensure_bundle(traffic, cfg, tmp_path / "cache")
    again = ensure_bundle(traffic, cfg, tmp_path / "cache")
    assert first == again and len(calls) == 1
    assert all((first / f).is_file() for f in FILES)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]
    other = ensure_bundle(traffic, cfg.replace(seeds=2), tmp_path / "cache")
    assert other != first and len(calls) == 2
    traffic.write_bytes(b"traffic-b")
    assert bundle_key(traffic, cfg) != first.name.removeprefix("bundle-")
    # engine-built training features (other knobs, other features) are another bundle
    assert bundle_key(traffic, cfg, "engine:a") != bundle_key(traffic, cfg, "engine:b")
    assert bundle_key(traffic, cfg, "engine:a") != bundle_key(traffic, cfg)


def test_requested_provider_that_is_missing_fails_loudly(bundle_dir: Path) -> None:
    from models.providers import CUDA, available_providers, resolve_providers
    from models.runtime import OnnxSession

    assert resolve_providers(None)[-1] == CPU or CUDA in available_providers()
    assert resolve_providers([CPU]) == [CPU]
    if CUDA in available_providers():
        pytest.skip("this host has CUDA: nothing is missing")
    with pytest.raises(InferenceError, match="CUDAExecutionProvider"):
        OnnxSession(bundle_dir / "fm.onnx", providers=[CUDA, CPU])


def test_settings_providers_reach_the_bundle(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streams.models_loader import load_models
    from streams.settings import Settings

    monkeypatch.setenv("SOLARIS_ONNX_PROVIDERS", "CPUExecutionProvider")
    models, _ = load_models(Settings(), bundle_dir)
    assert models.fm.session.provider == CPU
    monkeypatch.setenv("SOLARIS_ONNX_PROVIDERS", "NoSuchExecutionProvider")
    with pytest.raises(InferenceError, match="NoSuchExecutionProvider"):
        load_models(Settings(), bundle_dir)


def test_embedder_steps_overlapped_equal_one_call_per_batch(bundle_dir: Path) -> None:
    """The embed agent's split (inputs and records on its thread, the model on a model thread,
    batches overlapping) gives the records of one ``embed_messages`` call per batch."""
    from concurrent.futures import ThreadPoolExecutor

    from schemas.records import ProposalBatch
    from streams.engine.embedder import Embedder, PreparingModel

    b = load_bundle(bundle_dir)
    assert isinstance(b.fm, PreparingModel)
    hist = UserHistory.of([101, 102, 103], [1, 0, 1], [1_000, 2_000, 3_000])
    groups = [
        (
            [
                ProposalBatch(
                    f"r{g}-{m}", m + 1, 2_000 + 1_000 * g, 9, items, ("candidates",) * len(items)
                )
                for m in range(4)
                for items in [tuple(100 + (g + m + k) % 12 for k in range(3 + m))]
            ],
            [hist, UserHistory.empty(), hist, hist],
        )
        for g in range(6)
    ]
    want = [Embedder(b.fm).embed_messages(msgs, hists) for msgs, hists in groups]
    embedder = Embedder(b.fm)
    with ThreadPoolExecutor(1) as model_thread:
        prepared = [embedder.prepare_messages(msgs, hists) for msgs, hists in groups]
        futures = [model_thread.submit(embedder.run, p) for p in prepared]
        got = [embedder.records(p, f.result()) for p, f in zip(prepared, futures, strict=True)]
    assert got == want
    assert embedder.stats.pairs == sum(len(r) for r in want) and embedder.stats.batches == 6
    with pytest.raises(ValueError, match="returned 2 vectors"):
        embedder.records(prepared[0], np.zeros((2, DIM), np.float32))
