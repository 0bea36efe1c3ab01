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
#
# Runs that overlap share what they find: each run holds a lease on every service it uses
# (a file named by its pid under $SOLARIS_CACHE_DIR/run/services-leases/<service>-<port>/), and
# a service that some run of this script started is stopped by the last run to let go of it,
# not by the one that started it (a `make demo` begun while `make test` runs used to lose its
# broker and Redis when the tests ended). A service started by anything else (`solaris infra
# up`) is never stopped here. Starts, stops and leases change under one lock (flock).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_NAME=services
# shellcheck source=infra/lib.sh
source "$ROOT/infra/lib.sh"
export SOLARIS_PYTHON=${SOLARIS_PYTHON:-$ROOT/.venv/bin/python}
CACHE_DIR="${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}"
KAFKA_PORT="${SOLARIS_KAFKA_PORT:-9092}"
REDIS_PORT="${SOLARIS_REDIS_PORT:-6379}"
REGISTRY_PORT="${SOLARIS_SCHEMA_REGISTRY_PORT:-8081}"
RUN_KAFKA_DATA_DIR="${SOLARIS_SERVICES_KAFKA_DATA_DIR:-$CACHE_DIR/run/kafka-services-$KAFKA_PORT}"
LEASES="$CACHE_DIR/run/services-leases"
used=()  # the lease directory of each service this run uses
#: how long to wait for another run's start or stop (a broker start times out well before)
LOCK_WAIT_S="${SOLARIS_SERVICES_LOCK_WAIT_S:-600}"

mkdir -p "$LEASES"
# the lock's descriptor; every child started below gets it closed ({lock_fd}>&-), or a broker
# started while it is held would keep it held after this script died
exec {lock_fd}>"$LEASES/lock"

# lease_dir SERVICE PORT : where the leases of one service instance live
lease_dir() { echo "$LEASES/$1-$2"; }

# service_pid SERVICE : the pid of the instance this run uses (fails when none runs)
service_pid() { bash "$ROOT/infra/$1.sh" pid {lock_fd}>&-; }

# take SERVICE PORT STARTED : lease the instance; STARTED=1 marks it as started by this script
# (its "started" file holds the service's pid, so a later process on the port is not ours)
take() {
  local dir
  dir=$(lease_dir "$1" "$2")
  mkdir -p "$dir/users"
  : >"$dir/users/$$"
  if [[ "$3" == 1 ]]; then
    service_pid "$1" >"$dir/started"
  fi
  used+=("$1:$2")
}

# live_users DIR : the leases of DIR whose run is still alive (stale ones are removed; a run
# that ended but was not yet reaped by its parent is a zombie, not alive)
live_users() {
  local f pid n=0
  for f in "$1"/users/*; do
    [[ -e "$f" ]] || continue
    pid=${f##*/}
    if proc_alive "$pid" && proc_cmdline_has "$pid" with-services.sh; then
      n=$((n + 1))
    else
      rm -f "$f"
    fi
  done
  echo "$n"
}

# let_go SERVICE PORT : drop this run's lease; the last user of an instance this script
# started stops it (only if the pid it started still runs there)
let_go() {
  local dir started now
  dir=$(lease_dir "$1" "$2")
  rm -f "$dir/users/$$"
  if [[ "$(live_users "$dir")" != 0 ]]; then
    [[ -f "$dir/started" ]] && echo "[services] leaving $1 running: other runs still use it"
    return 0
  fi
  if [[ ! -f "$dir/started" ]]; then
    rmdir "$dir/users" "$dir" 2>/dev/null || true  # nobody left: no trace of the port
    return 0
  fi
  started=$(cat "$dir/started")
  now=$(service_pid "$1" 2>/dev/null || true)
  rm -f "$dir/started"
  rmdir "$dir/users" "$dir" 2>/dev/null || true
  [[ -n "$started" && "$started" == "$now" ]] || return 0
  if [[ "$1" == kafka ]]; then
    if bash "$ROOT/infra/kafka.sh" stop; then
      rm -rf "$RUN_KAFKA_DATA_DIR"
    else
      echo "[services] failed to stop kafka" >&2
    fi
  else
    bash "$ROOT/infra/$1.sh" stop || echo "[services] failed to stop $1" >&2
  fi
}

cleanup() {
  local svc
  if ! flock -w "$LOCK_WAIT_S" "$lock_fd"; then
    echo "[services] ERROR: no lock on $LEASES in ${LOCK_WAIT_S}s; leaving the services running" >&2
    return 0
  fi
  for svc in "${used[@]}"; do
    let_go "${svc%%:*}" "${svc##*:}"
  done
  flock -u "$lock_fd"
}
trap cleanup EXIT

flock -w "$LOCK_WAIT_S" "$lock_fd" || die "no lock on $LEASES in ${LOCK_WAIT_S}s (another run stuck starting or stopping?)"
if bash "$ROOT/infra/kafka.sh" status >/dev/null 2>&1; then
  echo "[services] kafka already running: reusing it"
  take kafka "$KAFKA_PORT" 0
else
  # From here on the command and every kafka.sh call (status, stop) see this script's broker.
  export SOLARIS_KAFKA_DATA_DIR="$RUN_KAFKA_DATA_DIR"
  if bash "$ROOT/infra/kafka.sh" status >/dev/null 2>&1; then
    echo "[services] kafka (started by another run on $RUN_KAFKA_DATA_DIR) already running: reusing it"
    take kafka "$KAFKA_PORT" 0
  else
    SOLARIS_KAFKA_FRESH=1 bash "$ROOT/infra/kafka.sh" start {lock_fd}>&-
    take kafka "$KAFKA_PORT" 1
  fi
fi
if bash "$ROOT/infra/redis.sh" status >/dev/null 2>&1; then
  echo "[services] redis already running: reusing it"
  take redis "$REDIS_PORT" 0
else
  bash "$ROOT/infra/redis.sh" start {lock_fd}>&-
  take redis "$REDIS_PORT" 1
fi
if [[ "${SOLARIS_SCHEMA_REGISTRY:-0}" == 1 ]]; then
  if bash "$ROOT/infra/schema_registry.sh" status >/dev/null 2>&1; then
    echo "[services] schema registry already running: reusing it"
    take schema_registry "$REGISTRY_PORT" 0
  else
    bash "$ROOT/infra/schema_registry.sh" start {lock_fd}>&-
    take schema_registry "$REGISTRY_PORT" 1
  fi
fi
flock -u "$lock_fd"

set +e
"$@" {lock_fd}>&-
rc=$?
set -e
exit $rc
