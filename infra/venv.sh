#!/usr/bin/env bash
# Create (once) the project virtualenv in a cache outside the clone, keyed by the hash of
# pyproject.toml + requirements.lock + the Python version, and point ./.venv at it.
# Re-runs are cheap: an existing complete venv is reused; only the editable install of this
# clone (no deps) is refreshed, so a fresh clone in another folder works with a cached venv.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}
PY=${SOLARIS_BOOTSTRAP_PYTHON:-python3.11}
EXTRAS=${SOLARIS_EXTRAS:-cpu,train,dev,aerospike}

command -v "$PY" >/dev/null || { echo "[venv] $PY not found: install Python 3.11" >&2; exit 1; }
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = "3.11" ] || { echo "[venv] need Python 3.11, $PY is $pyver" >&2; exit 1; }

# Key: the dependency declarations only (not tool settings), the lock file, Python and extras.
deps=$("$PY" - "$ROOT/pyproject.toml" <<'PYEOF'
import json, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(json.dumps([project.get("dependencies"), project.get("optional-dependencies")], sort_keys=True))
PYEOF
)
hash=$( (echo "$deps"; cat "$ROOT/requirements.lock" 2>/dev/null; echo "$pyver $EXTRAS") \
        | sha256sum | cut -c1-12)
VENV="$CACHE/venv-$hash"

if [ ! -f "$VENV/.complete" ]; then
  echo "[venv] creating $VENV (first run downloads torch & co: a few minutes)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip setuptools wheel
  constraint=()
  [ -f "$ROOT/requirements.lock" ] && constraint=(-c "$ROOT/requirements.lock")
  # Install dependencies only (from the project metadata); the project itself is installed
  # editable below, per clone.
  "$VENV/bin/pip" install "${constraint[@]}" "${ROOT}[${EXTRAS}]"
  "$VENV/bin/pip" uninstall -q -y solaris
  touch "$VENV/.complete"
  # Each venv holds several GB (torch): drop the ones of older dependency sets.
  for old in "$CACHE"/venv-*; do
    [ "$old" != "$VENV" ] && [ -d "$old" ] && { echo "[venv] removing stale $old"; rm -rf "$old"; }
  done
else
  echo "[venv] reusing $VENV"
fi

"$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT"
ln -sfn "$VENV" "$ROOT/.venv"
echo "[venv] ready: $ROOT/.venv -> $VENV"
