#!/usr/bin/env bash
# The unit suite on the other Pythons pyproject.toml supports (requires-python >=3.11,<3.14):
# each gets its interpreter (infra/python.sh builds one the machine lacks), its own cached
# dependency venv from the same universal hashed lock, and its own overlay ./.venv-<version>.
# Usage: bash infra/test-pythons.sh [VERSION ...] [-- PYTEST_ARGS]   (default: 3.12 3.13)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ "${#versions[@]}" -gt 0 ] || versions=(3.12 3.13)
# A Python this machine lacks and cannot build (3.12: no fetchable source) is skipped with its
# reason, like a test whose data is absent; SOLARIS_REQUIRE_PYTHONS=1 makes that a failure.
for v in "${versions[@]}"; do
  if ! py=$(bash "$ROOT/infra/python.sh" "$v"); then
    [ "${SOLARIS_REQUIRE_PYTHONS:-0}" = 1 ] && exit 1
    echo "[test-pythons] SKIPPED Python $v: not installed and not buildable here (see above)"
    continue
  fi
  echo "[test-pythons] Python $v: $py"
  SOLARIS_BOOTSTRAP_PYTHON=$py SOLARIS_OVERLAY="$ROOT/.venv-$v" bash "$ROOT/infra/venv.sh"
  (cd "$ROOT" && ".venv-$v/bin/python" -m pytest -m "not integration" -p no:cacheprovider "$@")
done
