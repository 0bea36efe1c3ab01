#!/usr/bin/env bash
# Local Confluent-compatible schema registry without Docker: Apicurio Registry (its `ccompat`
# API speaks the Confluent Schema Registry REST protocol), run from the `-all.zip` that Apicurio
# publishes on Maven Central (a Quarkus runner jar + lib/), with its schemas in an H2 file
# database in the data dir, so ids survive a restart.
#
#   infra/schema_registry.sh start|stop|status|pid|url|logs [-f]   (pid: the running registry's, or exit 1)
#
# Why this build: Apicurio 3.x (3.3.3) has no runnable artifact on Maven Central and its modules
# are only partly served there (apicurio-registry-schema-util-provider and
# apicurio-registry-contracts-rules 3.3.3 are missing, 3.0.9/3.3.2 lack their parent POM), so a
# Quarkus build of it cannot resolve. 2.6.13.Final ships apicurio-registry-app-*-all.zip, which
# runs as it is. Karapace is not on PyPI. See infra/README.md.
#
# Env knobs (defaults in brackets):
#   SOLARIS_CACHE_DIR                       [$HOME/.cache/solaris]  download + run dirs live here
#   SOLARIS_SCHEMA_REGISTRY_VERSION         [2.6.13.Final]  io.apicurio:apicurio-registry-app
#   SOLARIS_SCHEMA_REGISTRY_PORT            [8081]   HTTP on 127.0.0.1
#   SOLARIS_SCHEMA_REGISTRY_DATA_DIR        [$SOLARIS_CACHE_DIR/run/schema-registry-$PORT]
#   SOLARIS_SCHEMA_REGISTRY_HEAP            [384m]   -Xms64m -Xmx<this>
#   SOLARIS_SCHEMA_REGISTRY_COMPATIBILITY   [BACKWARD]  global compatibility level set at start
#   SOLARIS_SCHEMA_REGISTRY_START_TIMEOUT   [90]     seconds to wait for the API to answer
#   SOLARIS_SCHEMA_REGISTRY_STOP_TIMEOUT    [20]     seconds between SIGTERM and SIGKILL
#   SOLARIS_SCHEMA_REGISTRY_FRESH           [0]      1: delete the stored schemas before the start
#   SOLARIS_PYTHON                          [python3]  the readiness check (urllib)
#   JAVA                                    [java]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}"
VERSION="${SOLARIS_SCHEMA_REGISTRY_VERSION:-2.6.13.Final}"
PORT="${SOLARIS_SCHEMA_REGISTRY_PORT:-8081}"
DATA_DIR="${SOLARIS_SCHEMA_REGISTRY_DATA_DIR:-$CACHE_DIR/run/schema-registry-$PORT}"
HEAP="${SOLARIS_SCHEMA_REGISTRY_HEAP:-384m}"
COMPATIBILITY="${SOLARIS_SCHEMA_REGISTRY_COMPATIBILITY:-BACKWARD}"
START_TIMEOUT="${SOLARIS_SCHEMA_REGISTRY_START_TIMEOUT:-90}"
STOP_TIMEOUT="${SOLARIS_SCHEMA_REGISTRY_STOP_TIMEOUT:-20}"
FRESH="${SOLARIS_SCHEMA_REGISTRY_FRESH:-0}"
PYTHON="${SOLARIS_PYTHON:-python3}"
JAVA="${JAVA:-java}"

ARTIFACT="io.apicurio:apicurio-registry-app:$VERSION:zip:all"
DIST_DIR="$CACHE_DIR/apicurio-registry-$VERSION"
RUNNER="$DIST_DIR/apicurio-registry-app-$VERSION-runner.jar"
PID_FILE="$DATA_DIR/registry.pid"
LOG_FILE="$DATA_DIR/registry.log"
DB_DIR="$DATA_DIR/db"
URL="http://127.0.0.1:$PORT/apis/ccompat/v7"

LOG_NAME=schema-registry
# shellcheck source=infra/lib.sh
source "$HERE/lib.sh"

usage() {
  echo "usage: $0 start|stop|status|pid|url|logs [-f]" >&2
  exit 2
}

# --- download (once per version) ----------------------------------------------

ensure_dist() {
  [[ -f "$DIST_DIR/.complete" ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch $ARTIFACT)"
  mkdir -p "$CACHE_DIR"
  exec 8>"$CACHE_DIR/.apicurio-registry-$VERSION.lock"
  flock 8
  if [[ -f "$DIST_DIR/.complete" ]]; then
    exec 8>&-
    return 0
  fi
  log "fetching $ARTIFACT into $DIST_DIR (one-time, ~140 MB)..."
  rm -rf "$DIST_DIR"
  mkdir -p "$DIST_DIR"
  local mvn_log="$DIST_DIR/mvn.log"
  if ! mvn -q -B -Dstyle.color=never \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
      -Dartifact="$ARTIFACT" -DoutputDirectory="$DIST_DIR/zip" >"$mvn_log" 2>&1; then
    tail -n 40 "$mvn_log" >&2
    die "mvn could not fetch $ARTIFACT (full output: $mvn_log)"
  fi
  "$PYTHON" -m zipfile -e "$DIST_DIR"/zip/*.zip "$DIST_DIR" || die "could not unpack $DIST_DIR/zip"
  rm -rf "$DIST_DIR/zip"
  [[ -f "$RUNNER" ]] || die "no $(basename "$RUNNER") in $DIST_DIR after unpacking"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$DIST_DIR/.complete"
  exec 8>&-
  log "registry ready in $DIST_DIR"
}

# --- process helpers ------------------------------------------------------------

is_our_registry() {
  proc_alive "$1" && proc_cmdline_has "$1" "-Dquarkus.http.port=$PORT -jar $RUNNER"
}

running_pid() {
  local pid
  pid="$(read_pid_file "$PID_FILE")" || return 1
  is_our_registry "$pid" || return 1
  echo "$pid"
}

# http METHOD PATH [BODY] : one request to the ccompat API; prints the body, fails on non-2xx.
http() {
  "$PYTHON" - "$1" "$URL$2" "${3:-}" <<'PYEOF'
import sys, urllib.request
method, url, body = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(url, data=body.encode() or None, method=method,
                             headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
try:
    with urllib.request.urlopen(req, timeout=5) as resp:
        sys.stdout.write(resp.read().decode())
except Exception as exc:  # refused, timeout, HTTP error: not ready / failed
    sys.stderr.write(f"{method} {url}: {exc}\n")
    sys.exit(1)
PYEOF
}

# wait_ready TIMEOUT_S [PID] : until GET /subjects answers (2 when PID died, 1 on timeout).
# PID is the process just started (or one running_pid verified), so only its death is checked:
# right after `nohup setsid java &` its command line is still nohup's or setsid's until they
# exec the JVM, and a command-line check there reported a live registry as dead under load.
wait_ready() {
  local deadline=$((SECONDS + $1))
  while (( SECONDS < deadline )); do
    if [[ -n "${2:-}" ]] && ! proc_alive "$2"; then
      return 2
    fi
    http GET /subjects >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# --- commands -------------------------------------------------------------------

cmd_start() {
  local pid
  if pid="$(running_pid)"; then
    if wait_ready 10 "$pid"; then
      log "already running (pid $pid, $URL)"
      return 0
    fi
    die "registry pid $pid is alive but does not answer on $URL; run '$0 stop' first"
  fi
  rm -f "$PID_FILE"
  command -v "$JAVA" >/dev/null || die "java not found (JDK 17+ needed)"
  command -v "$PYTHON" >/dev/null || die "python not found: $PYTHON (set SOLARIS_PYTHON)"
  port_in_use "$PORT" && die "port 127.0.0.1:$PORT is already in use (set SOLARIS_SCHEMA_REGISTRY_PORT)"
  ensure_dist
  if [[ "$FRESH" == 1 ]]; then
    log "fresh start: deleting the stored schemas in $DB_DIR"
    rm -rf "$DB_DIR"
  fi
  mkdir -p "$DB_DIR"
  log "starting Apicurio Registry $VERSION on 127.0.0.1:$PORT (data $DATA_DIR)"
  echo "===== $(date -u +%Y-%m-%dT%H:%M:%SZ) start =====" >>"$LOG_FILE"
  local t0=$SECONDS
  # The H2 file database keeps the schemas (and so their ids) across restarts.
  REGISTRY_DATASOURCE_URL="jdbc:h2:file:$DB_DIR/registry" \
    nohup setsid "$JAVA" -Xms64m "-Xmx$HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Djava.awt.headless=true -Dquarkus.http.host=127.0.0.1 \
    -Dquarkus.http.port="$PORT" -jar "$RUNNER" </dev/null >>"$LOG_FILE" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
  local rc=0
  wait_ready "$START_TIMEOUT" "$pid" || rc=$?
  if [[ $rc -ne 0 ]]; then
    if [[ $rc -eq 2 ]]; then
      err "registry process $pid exited during startup"
    else
      err "registry did not answer on $URL within ${START_TIMEOUT}s; stopping it"
      stop_pid_with is_our_registry "$pid" "$STOP_TIMEOUT"
    fi
    rm -f "$PID_FILE"
    show_tails "$LOG_FILE"
    exit 1
  fi
  http PUT /config "{\"compatibility\": \"$COMPATIBILITY\"}" >/dev/null \
    || die "could not set the global compatibility to $COMPATIBILITY"
  log "ready after $((SECONDS - t0))s (pid $pid, $URL, compatibility $COMPATIBILITY)"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    log "not running (port $PORT)"
    rm -f "$PID_FILE"
    return 0
  fi
  log "stopping registry pid $pid (SIGTERM, up to ${STOP_TIMEOUT}s)"
  stop_pid_with is_our_registry "$pid" "$STOP_TIMEOUT"
  rm -f "$PID_FILE"
  log "stopped"
}

cmd_status() {
  local pid
  if ! pid="$(running_pid)"; then
    log "not running (port $PORT, data $DATA_DIR)"
    return 3
  fi
  if http GET /subjects >/dev/null 2>&1; then
    log "running: pid $pid, $URL, ready"
    return 0
  fi
  log "running: pid $pid, $URL, NOT answering"
  return 1
}

cmd_logs() {
  [[ -f "$LOG_FILE" ]] || die "no registry log at $LOG_FILE"
  if [[ "${1:-}" == "-f" ]]; then
    exec tail -n 100 -F "$LOG_FILE"
  fi
  tail -n 100 "$LOG_FILE"
}

main() {
  [[ $# -ge 1 ]] || usage
  local cmd="$1"
  shift
  case "$cmd" in
    start|stop) lock_dir "$DATA_DIR" 300 ;;
  esac
  case "$cmd" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    pid) running_pid ;;
    url) echo "$URL" ;;
    logs) cmd_logs "$@" ;;
    *) usage ;;
  esac
}

main "$@"
