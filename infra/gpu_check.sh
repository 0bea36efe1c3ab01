#!/usr/bin/env bash
# `make gpu-check`: is this host ready to run the FM on CUDA, and how fast is it there?
#   1. onnxruntime is the GPU build (exactly one onnxruntime wheel: the `gpu` extra, not `cpu`)
#      and a session really runs on CUDAExecutionProvider, IO binding included: onnxruntime-gpu
#      lists CUDA even when the CUDA/cuDNN libraries cannot load and then runs on CPU, so the
#      check builds a session and compares its outputs with CPU's. Fails loudly (exit 1) if not.
#   2. `solaris bench fm` with SOLARIS_ONNX_PROVIDERS=CUDA,CPU (bare onnxruntime, the engine's
#      Embedder and a live FM worker; Kafka and Redis started if needed, like `make bench`),
#      JSON to bench/results/fm-cuda.json (fm-cuda-smoke.json with --smoke).
#   3. prints the providers, pairs/s per batch size and live/bare.
# Usage: infra/gpu_check.sh [--smoke]     exit 0 ok, 1 no usable CUDA, 2 bench failed
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${SOLARIS_PYTHON:-$ROOT/.venv/bin/python}
SMOKE=()
OUT="$ROOT/bench/results/fm-cuda.json"
case "${1:-}" in
  "") ;;
  --smoke) SMOKE=(--smoke); OUT="$ROOT/bench/results/fm-cuda-smoke.json" ;;
  *) echo "usage: $0 [--smoke]" >&2; exit 64 ;;
esac
CUDA_PROVIDERS=CUDAExecutionProvider,CPUExecutionProvider

# CUDA/cuDNN user-space libraries installed as NVIDIA pip wheels (site-packages/nvidia/*/lib)
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for dir in "$site"/nvidia/*/lib; do
  [ -d "$dir" ] && LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"

echo "[gpu-check] 1/3 onnxruntime build and a CUDA session"
cd "$ROOT"
"$PY" - <<'PYEOF' || exit 1
import importlib.metadata as md
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


def fail(msg: str) -> None:
    print(f"[gpu-check] FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def installed(dist: str) -> bool:
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


wheels = [d for d in ("onnxruntime", "onnxruntime-gpu") if installed(d)]
print(f"  onnxruntime {ort.__version__} from {wheels}, device {ort.get_device()}")
print(f"  available providers: {ort.get_available_providers()}")
if len(wheels) > 1:
    fail("both onnxruntime and onnxruntime-gpu are installed; they ship the same module and "
         "the CPU one may win: install only the `gpu` extra (see docs/deploying.md)")
if CUDA not in ort.get_available_providers():
    fail(f"{CUDA} is not available in this onnxruntime build ({wheels}): install the `gpu` "
         "extra (onnxruntime-gpu) on a host with an NVIDIA GPU and driver")
try:
    import onnx
    from onnx import TensorProto, helper
except ImportError:
    fail("the CUDA session check builds a tiny model with `onnx` (train extra): install it")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 64])
w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.random.default_rng(0).normal(size=4096).astype(np.float32).tolist())
graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])], "check", [x], [y], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8

from models.errors import InferenceError
from models.runtime import OnnxSession

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "check.onnx"
    onnx.save(model, str(path))
    try:
        gpu = OnnxSession(path, providers=[CUDA, CPU])
    except InferenceError as exc:
        fail(str(exc))
    cpu = OnnxSession(path, providers=[CPU])
    batch = {"x": np.random.default_rng(1).normal(size=(256, 64)).astype(np.float32)}
    got, want = gpu.run(batch)["y"], cpu.run(batch)["y"]
print(f"  session on {gpu.provider}, IO binding on {gpu.device}:{gpu.device_id}")
if gpu.provider != CUDA or gpu.device != "cuda":
    fail(f"the session runs on {gpu.provider} (binding {gpu.device}), not CUDA")
err = float(np.max(np.abs(got - want)))
print(f"  CUDA vs CPU max abs difference {err:.2e}")
if err > 1e-3:
    fail(f"CUDA outputs differ from CPU by {err}")
PYEOF

echo "[gpu-check] 2/3 solaris bench fm ${SMOKE[*]} on $CUDA_PROVIDERS -> $OUT"
SOLARIS_ONNX_PROVIDERS=$CUDA_PROVIDERS SOLARIS_LOG_LEVEL=${SOLARIS_LOG_LEVEL:-WARNING} \
  bash "$ROOT/infra/with-services.sh" "$PY" -m streams.cli bench fm --json "$OUT" "${SMOKE[@]}" \
  || { echo "[gpu-check] FAIL: solaris bench fm exited non-zero" >&2; exit 2; }

echo "[gpu-check] 3/3 summary"
"$PY" - "$OUT" <<'PYEOF' || exit 1
import json
import sys

res = json.load(open(sys.argv[1]))
r = res["results"]
print(f"  FM provider: {r['provider']} (onnx threads {r['onnx_threads']}, dim {r['dim']}, L {r['history_len']})")
print(f"  {'batch':>8} {'bare pairs/s':>14} {'engine pairs/s':>15} {'engine/bare':>12}")
for n, p in r["pairs_per_s"].items():
    print(f"  {n:>8} {p['bare']:>14,.0f} {p['embedder']:>15,.0f} {p['embedder'] / p['bare']:>12.3f}")
live = r.get("live") or {}
if live.get("pairs_per_s"):
    print(f"  live FM worker: {live['pairs_per_s']:,.0f} pairs/s ({live['pairs_per_fm_call']:.0f} pairs per FM call)")
for k, v in res["ratios"].items():
    if k.startswith("live_over_bare"):
        print(f"  {k}: {v:.3f}" if v is not None else f"  {k}: n/a")
if r["provider"] != "CUDAExecutionProvider":
    print(f"[gpu-check] FAIL: bench ran on {r['provider']}", file=sys.stderr)
    sys.exit(1)
print(f"[gpu-check] OK: {sys.argv[1]}")
PYEOF
