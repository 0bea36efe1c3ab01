#!/usr/bin/env bash
# Run a command with the local Kafka broker and Redis up: start what is not running, run the
# command, then stop only what this script started. Exits with the command's exit code.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SOLARIS_PYTHON=${SOLARIS_PYTHON:-$ROOT/.venv/bin/python}
started=()

cleanup() {
  local svc
  for svc in "${started[@]}"; do
    bash "$ROOT/infra/$svc.sh" stop || echo "[services] failed to stop $svc" >&2
  done
}
trap cleanup EXIT

for svc in kafka redis; do
  if bash "$ROOT/infra/$svc.sh" status >/dev/null 2>&1; then
    echo "[services] $svc already running: reusing it"
  else
    bash "$ROOT/infra/$svc.sh" start
    started+=("$svc")
  fi
done

set +e
"$@"
rc=$?
set -e
exit $rc
