#!/usr/bin/env bash
# Run a command with the local Kafka broker and Redis up: start what is not running, run the
# command, then stop only what this script started. Exits with the command's exit code.
#
# A broker this script starts itself runs on a data dir of its own, emptied before the start and
# deleted after the stop: a test run makes hundreds of topics, and a broker that kept them run
# after run took longer to start each time (past the start timeout in CI at ~13k partitions).
# A broker that is already running is reused as it is. The command runs with
# SOLARIS_KAFKA_DATA_DIR set to this script's broker, so `solaris infra status` finds it.
# SOLARIS_SCHEMA_REGISTRY=1 also starts the schema registry (infra/schema_registry.sh); without
# it the run does not pay for one.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SOLARIS_PYTHON=${SOLARIS_PYTHON:-$ROOT/.venv/bin/python}
CACHE_DIR="${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}"
KAFKA_PORT="${SOLARIS_KAFKA_PORT:-9092}"
RUN_KAFKA_DATA_DIR="${SOLARIS_SERVICES_KAFKA_DATA_DIR:-$CACHE_DIR/run/kafka-services-$KAFKA_PORT}"
started=()

cleanup() {
  local svc
  for svc in "${started[@]}"; do
    if [[ "$svc" == kafka ]]; then
      if bash "$ROOT/infra/kafka.sh" stop; then
        rm -rf "$RUN_KAFKA_DATA_DIR"
      else
        echo "[services] failed to stop kafka" >&2
      fi
    else
      bash "$ROOT/infra/$svc.sh" stop || echo "[services] failed to stop $svc" >&2
    fi
  done
}
trap cleanup EXIT

if bash "$ROOT/infra/kafka.sh" status >/dev/null 2>&1; then
  echo "[services] kafka already running: reusing it"
else
  # From here on the command and every kafka.sh call (status, stop) see this script's broker.
  export SOLARIS_KAFKA_DATA_DIR="$RUN_KAFKA_DATA_DIR"
  if bash "$ROOT/infra/kafka.sh" status >/dev/null 2>&1; then
    echo "[services] kafka (left by an earlier run on $RUN_KAFKA_DATA_DIR) already running: reusing it"
  else
    started+=(kafka)
    SOLARIS_KAFKA_FRESH=1 bash "$ROOT/infra/kafka.sh" start
  fi
fi
if bash "$ROOT/infra/redis.sh" status >/dev/null 2>&1; then
  echo "[services] redis already running: reusing it"
else
  bash "$ROOT/infra/redis.sh" start
  started+=(redis)
fi
if [[ "${SOLARIS_SCHEMA_REGISTRY:-0}" == 1 ]]; then
  if bash "$ROOT/infra/schema_registry.sh" status >/dev/null 2>&1; then
    echo "[services] schema registry already running: reusing it"
  else
    bash "$ROOT/infra/schema_registry.sh" start
    started+=(schema_registry)
  fi
fi

set +e
"$@"
rc=$?
set -e
exit $rc
