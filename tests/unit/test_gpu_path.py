"""The GPU path of models.runtime on a CPU host: when IO binding is chosen, and that the bound
code path (the one CUDA runs) gives the plain path's outputs bit for bit.

No GPU here: the CUDA run itself is checked by ``make gpu-check`` on a GPU host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.errors import InferenceError
from models.features import Vocab
from models.providers import CPU, CUDA, available_providers, binding_device, inactive_providers
from models.runtime import (
    FMRunner,
    OnnxSession,
    UserHistory,
)
from streams.settings import REPO_ROOT

L = 5
DIM = 8
ITEMS = np.arange(100, 110, dtype=np.int64)


@pytest.mark.parametrize(
    ("provider", "io_binding", "expected"),
    [
        (CUDA, None, "cuda"),  # automatic: bind on the GPU
        (CPU, None, None),  # automatic: plain run on CPU (unchanged path)
        (CUDA, False, None),
        (CPU, False, None),
        (CPU, True, "cpu"),  # forced: the bound path on the CPU device
        (CUDA, True, "cuda"),
    ],
)
def test_binding_device_selection(provider: str, io_binding: bool | None, expected: str) -> None:
    assert binding_device(provider, io_binding) == expected


def test_forced_binding_on_an_unknown_provider_fails_loudly() -> None:
    with pytest.raises(InferenceError, match="TensorrtExecutionProvider"):
        binding_device("TensorrtExecutionProvider", True)
    assert binding_device("TensorrtExecutionProvider", None) is None


@pytest.fixture(scope="module")
def fm_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch", reason="exporting a test FM needs the 'train' extra")
    from models.export import export_fm
    from models.fm import FoundationModel

    torch.manual_seed(1)
    fm = FoundationModel(len(ITEMS) + 2, item_dim=8, hidden=16, dim=DIM, heads=2).eval()
    path = tmp_path_factory.mktemp("gpu-path") / "fm.onnx"
    export_fm(fm, L, path, {"model_version": "v-test"})
    return path


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[UserHistory]]:
    rng = np.random.default_rng(3)
    t0 = 1_700_000_000_000
    hists = [
        UserHistory.of(
            rng.choice(ITEMS, 7).tolist(),
            rng.integers(0, 2, 7).tolist(),
            [t0 + i for i in range(7)],
        )
        for _ in range(n)
    ]
    users = np.arange(n, dtype=np.int64)
    items = rng.choice(np.append(ITEMS, 999), n).astype(np.int64)  # 999: out of vocabulary
    times = np.full(n, t0 + 5, np.int64)
    return users, items, times, hists


def test_cpu_default_keeps_the_plain_run(fm_onnx: Path) -> None:
    assert OnnxSession(fm_onnx, providers=[CPU]).device is None


@pytest.mark.parametrize("n", [1, 33])
def test_bound_path_gives_identical_outputs(fm_onnx: Path, n: int) -> None:
    plain = OnnxSession(fm_onnx, providers=[CPU], io_binding=False)
    bound = OnnxSession(fm_onnx, providers=[CPU], io_binding=True)
    assert (plain.device, bound.device) == (None, "cpu")
    vocab = Vocab(ITEMS)
    args = _pairs(n)
    emb_a, logit_a = FMRunner(plain, vocab, L, "v-test", DIM).embed(*args)
    emb_b, logit_b = FMRunner(bound, vocab, L, "v-test", DIM).embed(*args)
    assert emb_b.shape == (n, DIM) and emb_b.dtype == np.float32 and logit_b.shape == (n,)
    np.testing.assert_array_equal(emb_b, emb_a)
    np.testing.assert_array_equal(logit_b, logit_a)


def test_bound_path_wraps_onnxruntime_errors(fm_onnx: Path) -> None:
    bound = OnnxSession(fm_onnx, providers=[CPU], io_binding=True)
    with pytest.raises(InferenceError, match="inference failed"):
        bound.run({"no_such_input": np.zeros(2, np.float32)})


def test_a_provider_the_session_did_not_get_is_reported() -> None:
    # onnxruntime-gpu lists CUDA, then falls back to CPU when its libraries do not load
    assert inactive_providers([CUDA, CPU], [CPU]) == [CUDA]
    assert inactive_providers([CUDA, CPU], [CUDA, CPU]) == []
    assert inactive_providers([CPU], [CPU]) == []


def test_gpu_check_fails_loudly_without_cuda() -> None:
    if CUDA in available_providers():
        pytest.skip("this host has CUDA: run `make gpu-check` instead")
    env = {**os.environ, "SOLARIS_PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "gpu_check.sh"), "--smoke"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stderr and CUDA in proc.stderr
    assert "2/3" not in proc.stdout  # stopped before starting services or the bench
