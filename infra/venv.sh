#!/usr/bin/env bash
# Create (once) the dependencies' virtualenv in a cache outside the clone, keyed by the hash of
# pyproject.toml + requirements.lock + the Python version, and give this clone its own small
# ./.venv on top of it: the clone's editable install lives there, the dependencies (torch & co,
# several GB) are read from the shared one through a .pth file.
# Why not one shared venv with the clone installed in it: every clone (a CI clone, a second
# checkout) re-pointed that editable install at itself, so another clone's .venv silently ran
# the last installer's code. Re-runs are cheap: both are reused when complete.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}
PY=${SOLARIS_BOOTSTRAP_PYTHON:-python3.11}
LOCKED_EXTRAS=cpu,train,dev,aerospike  # what requirements.lock was compiled for (infra/lock.sh)
EXTRAS=${SOLARIS_EXTRAS:-$LOCKED_EXTRAS}
DIST=solaris-recsys  # pyproject's [project] name

command -v "$PY" >/dev/null || { echo "[venv] $PY not found: install Python 3.11 (or build 3.13: infra/python.sh)" >&2; exit 1; }

# Setup never deletes what it did not create: a ./.venv this script did not make (no marker, no
# link to the shared venv) is refused, not replaced.
# SOLARIS_OVERLAY: another overlay for another Python (make test-pythons: .venv-3.13)
OVERLAY=${SOLARIS_OVERLAY:-"$ROOT/.venv"}
ours_overlay() {
  [ -f "$OVERLAY/.solaris-overlay" ] && return 0
  compgen -G "$OVERLAY/lib/python*/site-packages/_solaris_shared_venv.pth" >/dev/null
}
if [ -e "$OVERLAY" ] && [ ! -L "$OVERLAY" ] && ! ours_overlay; then
  echo "[venv] $OVERLAY exists and was not made by infra/venv.sh: move it away (nothing was deleted)" >&2
  exit 1
fi
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$pyver" in
  3.11|3.12|3.13) ;;  # requires-python in pyproject.toml; the lock is universal over these
  *) echo "[venv] need Python 3.11-3.13, $PY is $pyver" >&2; exit 1 ;;
esac

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
  # Dependencies only; the project itself is installed editable below, per clone.
  if [ "$EXTRAS" = "$LOCKED_EXTRAS" ] && [ -f "$ROOT/requirements.lock" ]; then
    # The lock is the whole closure with sha256 hashes (infra/lock.sh): every wheel is checked,
    # nothing unpinned comes in; `pip check` then catches a lock that no longer fits pyproject.
    "$VENV/bin/pip" install --require-hashes --no-deps -r "$ROOT/requirements.lock"
    "$VENV/bin/pip" check
  else
    # Another extras set (e.g. gpu,train,dev) is resolved by pip under the lock's versions as
    # plain constraints (hashes dropped: pip cannot hash-check the project directory itself).
    pins="$VENV/lock-constraints.txt"
    grep -oE '^[A-Za-z0-9._-]+==[^ ;]+' "$ROOT/requirements.lock" >"$pins" || true
    "$VENV/bin/pip" install -c "$pins" "${ROOT}[${EXTRAS}]"
    "$VENV/bin/pip" uninstall -q -y "$DIST"
  fi
  touch "$VENV/.complete"
else
  echo "[venv] reusing $VENV"
fi
touch "$VENV/.last-used"
# Each venv holds several GB (torch): drop the ones no clone has set up for 14 days. Another
# extras set in use (the GPU venv next to the CPU one) or another branch's lock stays, and so
# does anything this script did not build (no .complete marker).
for old in "$CACHE"/venv-*; do
  [ "$old" != "$VENV" ] && [ -d "$old" ] && [ -f "$old/.complete" ] || continue
  marker="$old/.last-used"
  [ -e "$marker" ] || marker="$old"
  if [ -n "$(find "$marker" -maxdepth 0 -mtime +14 2>/dev/null)" ]; then
    echo "[venv] removing $old (unused for 14 days)"
    rm -rf "$old"
  fi
done

# An editable install left in the shared venv by the old layout would shadow nothing (the
# clone's own comes first) but would still point at some clone: drop it.
for dist in "$DIST" solaris; do  # "solaris": the distribution's name before the rename
  if "$VENV/bin/python" -c "import importlib.metadata as m; m.version('$dist')" 2>/dev/null; then
    "$VENV/bin/pip" uninstall -q -y "$dist"
  fi
done

[ -L "$OVERLAY" ] && rm -f "$OVERLAY"  # the old layout: a symlink to the shared venv
if [ ! -x "$OVERLAY/bin/python" ]; then
  rm -rf "$OVERLAY"  # ours (checked above) but broken
  "$PY" -m venv --without-pip "$OVERLAY"
fi
touch "$OVERLAY/.solaris-overlay"
site="$OVERLAY/lib/python$pyver/site-packages"
shared_site="$VENV/lib/python$pyver/site-packages"
# addsitedir also runs the shared site's own .pth files; the clone's site-packages stays first.
echo "import site; site.addsitedir('$shared_site')" >"$site/_solaris_shared_venv.pth"
# pip and setuptools come from the shared venv through that .pth.
# the editable install under the distribution's old name ("solaris") would sit beside it
if "$OVERLAY/bin/python" -c "import importlib.metadata as m; m.version('solaris')" 2>/dev/null; then
  "$OVERLAY/bin/python" -m pip uninstall -q -y solaris
fi
"$OVERLAY/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"
echo "[venv] ready: $OVERLAY (this clone) on $VENV (dependencies)"
