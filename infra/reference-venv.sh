#!/usr/bin/env bash
# The reference SASRec's environment for `solaris fm benchmark`: RecBole 1.2.1 in a venv of its
# own under the cache (its pins clash with ours: numpy < 2, colorlog 4.7.2), keyed by the hash of
# infra/reference/requirements.txt and the Python version. torch comes from the project's
# dependency venv through a .pth file placed after the venv's own packages (no second multi-GB
# download). Prints the venv's python on its last line. Re-runs reuse a complete venv.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}
PY=${SOLARIS_BOOTSTRAP_PYTHON:-python3.11}
REQ="$ROOT/infra/reference/requirements.txt"
RECBOLE=recbole==1.2.1
THOP=thop==0.1.1.post2209072238  # imported by RecBole's trainer (FLOPs); needs torch only

# the project's own venv (infra/venv.sh): where torch is
torch_site=$("$ROOT/.venv/bin/python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') || {
  echo "[reference] run 'make setup' first: torch comes from the project's venv" >&2; exit 1; }
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
hash=$( (cat "$REQ"; echo "$RECBOLE $THOP $pyver") | sha256sum | cut -c1-12)
VENV="$CACHE/reference-$hash"
if [ ! -f "$VENV/.complete" ]; then
  echo "[reference] creating $VENV (RecBole and its dependencies, without torch)" >&2
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install -q -r "$REQ" >&2
  "$VENV/bin/pip" install -q --no-deps "$RECBOLE" "$THOP" >&2
  touch "$VENV/.complete"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# appended after the venv's own site-packages: its numpy 1.26 wins over the project's numpy 2
echo "import sys; sys.path.append('$torch_site')" >"$site/_solaris_torch.pth"
"$VENV/bin/python" -c 'import torch, recbole, numpy; assert numpy.__version__.startswith("1.")' >&2
echo "$VENV/bin/python"
