#!/usr/bin/env bash
# Local single-node Apache Kafka broker (KRaft, broker+controller) without Docker.
#
#   infra/kafka.sh start|stop|status|pid|logs [-f]   (pid: the running broker's, or exit 1)
#
# Env knobs (defaults in brackets):
#   SOLARIS_CACHE_DIR               [$HOME/.cache/solaris]  jars + run dirs live here
#   SOLARIS_KAFKA_PORT              [9092]   PLAINTEXT listener on 127.0.0.1
#   SOLARIS_KAFKA_CONTROLLER_PORT   [9093]   KRaft controller listener on 127.0.0.1
#   SOLARIS_KAFKA_DATA_DIR          [$SOLARIS_CACHE_DIR/run/kafka-$PORT]
#   SOLARIS_KAFKA_HEAP              [-Xms512m -Xmx1g]  (a bare size like "768m" sets both)
#   SOLARIS_KAFKA_START_TIMEOUT     [120]    seconds to wait for a METADATA answer
#   SOLARIS_KAFKA_STOP_TIMEOUT      [30]     seconds between SIGTERM and SIGKILL
#   SOLARIS_KAFKA_FRESH             [0]      1: start from an empty data dir (its topics are deleted)
#   SOLARIS_KAFKA_WARN_PARTITIONS   [2000]   warn at start when the data dir holds more partitions
#   SOLARIS_PYTHON                  [python3] runs infra/kafka_ready.py
#   JAVA                            [java]
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_INFRA_DIR="$SCRIPT_DIR/kafka"
POM="$KAFKA_INFRA_DIR/pom.xml"
LOG4J_CONF="$KAFKA_INFRA_DIR/log4j2.properties"
SERVER_TEMPLATE="$KAFKA_INFRA_DIR/server.properties.in"
READY_PY="$SCRIPT_DIR/kafka_ready.py"

CACHE_DIR="${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}"
PORT="${SOLARIS_KAFKA_PORT:-9092}"
CONTROLLER_PORT="${SOLARIS_KAFKA_CONTROLLER_PORT:-9093}"
DATA_DIR="${SOLARIS_KAFKA_DATA_DIR:-$CACHE_DIR/run/kafka-$PORT}"
HEAP="${SOLARIS_KAFKA_HEAP:--Xms512m -Xmx1g}"
START_TIMEOUT="${SOLARIS_KAFKA_START_TIMEOUT:-120}"
STOP_TIMEOUT="${SOLARIS_KAFKA_STOP_TIMEOUT:-30}"
FRESH="${SOLARIS_KAFKA_FRESH:-0}"
WARN_PARTITIONS="${SOLARIS_KAFKA_WARN_PARTITIONS:-2000}"
PYTHON="${SOLARIS_PYTHON:-python3}"
JAVA="${JAVA:-java}"

PID_FILE="$DATA_DIR/kafka.pid"
SERVER_PROPS="$DATA_DIR/server.properties"
CLUSTER_ID_FILE="$DATA_DIR/cluster.id"
LOG_DIR="$DATA_DIR/logs"
BROKER_LOG="$LOG_DIR/server.log"
OUT_LOG="$LOG_DIR/kafka.out"
KRAFT_DIR="$DATA_DIR/kraft-logs"

# KAFKA-15413: Kafka's CLI tools choke on a COLUMNS value from the shell.
unset COLUMNS

LOG_NAME=kafka
# shellcheck source=infra/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
  echo "usage: $0 start|stop|status|pid|logs [-f]" >&2
  exit 2
}

# --- jars -------------------------------------------------------------------

libs_dir() {
  local sha
  sha="$(sha256sum "$POM" | cut -c1-12)"
  echo "$CACHE_DIR/kafka-$sha/libs"
}

ensure_jars() {
  local libs marker
  libs="$(libs_dir)"
  marker="$(dirname "$libs")/.complete"
  if [[ -f "$marker" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (needed once to fetch the Kafka jars)"
  # One download at a time per cache (two brokers may start at once).
  mkdir -p "$(dirname "$libs")"
  exec 8>"$(dirname "$libs")/.lock"
  flock 8
  if [[ -f "$marker" ]]; then
    exec 8>&-
    return 0
  fi
  log "fetching Kafka jars into $libs (one-time)..."
  # A partial earlier download is redone from scratch.
  rm -rf "$libs"
  mkdir -p "$libs"
  local mvn_log
  mvn_log="$(dirname "$libs")/mvn.log"
  if ! mvn -q -B -Dstyle.color=never -f "$POM" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory="$libs" -DincludeScope=runtime >"$mvn_log" 2>&1; then
    tail -n 40 "$mvn_log" >&2
    rm -rf "$libs"
    die "mvn could not fetch the Kafka jars (full output: $mvn_log)"
  fi
  compgen -G "$libs/kafka_2.13-*.jar" >/dev/null || die "no kafka_2.13 jar in $libs after mvn"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$marker"
  exec 8>&-
  log "jars ready ($(find "$libs" -name '*.jar' | wc -l) jars)"
}

# --- process helpers ---------------------------------------------------------

# True when $1 is a live (non-zombie) process running our broker config.
is_our_broker() {
  proc_alive "$1" && proc_cmdline_has "$1" "kafka.Kafka $SERVER_PROPS"
}

running_pid() {
  local pid
  pid="$(read_pid_file "$PID_FILE")" || return 1
  is_our_broker "$pid" || return 1
  echo "$pid"
}

ready_check() {
  # $1 = timeout seconds, $2 = optional pid to watch
  local args=(--bootstrap "127.0.0.1:$PORT" --timeout "$1")
  if [[ -n "${2:-}" ]]; then
    args+=(--pid "$2")
  fi
  "$PYTHON" "$READY_PY" "${args[@]}"
}

show_log_tail() { show_tails "$BROKER_LOG" "$OUT_LOG"; }

# --- config / storage --------------------------------------------------------

new_cluster_id() {
  # base64url UUID without padding (22 chars); like Kafka, avoid a leading '-'.
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" != -* ]] && break
  done
  echo "$id"
}

write_config() {
  mkdir -p "$DATA_DIR" "$LOG_DIR" "$KRAFT_DIR"
  local tmpl
  tmpl="$(<"$SERVER_TEMPLATE")"
  tmpl="${tmpl//@PORT@/$PORT}"
  tmpl="${tmpl//@CONTROLLER_PORT@/$CONTROLLER_PORT}"
  tmpl="${tmpl//@LOG_DIRS@/$KRAFT_DIR}"
  printf '%s\n' "$tmpl" >"$SERVER_PROPS"
  if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
    new_cluster_id >"$CLUSTER_ID_FILE"
  fi
}

format_storage() {
  local libs="$1" cid
  cid="$(<"$CLUSTER_ID_FILE")"
  if [[ -f "$KRAFT_DIR/meta.properties" ]]; then
    return 0  # already formatted (StorageTool --ignore-formatted would say the same, slower)
  fi
  log "formatting storage in $KRAFT_DIR (cluster id $cid)"
  if ! "$JAVA" -Xmx256m -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$LOG_DIR" \
      -cp "$libs/*" kafka.tools.StorageTool format \
      -t "$cid" -c "$SERVER_PROPS" --ignore-formatted >>"$OUT_LOG" 2>&1; then
    show_log_tail
    die "storage format failed"
  fi
}

# Start from nothing: a broker loads every partition it holds before it answers, so a data dir
# that piled up topics run after run (tests make their own topics) starts slower each time; past
# ~10k partitions it missed the start timeout on a 2-core machine.
wipe_data_dir() {
  [[ -d "$DATA_DIR" ]] || return 0
  log "fresh start: deleting the broker data in $DATA_DIR"
  rm -rf "$KRAFT_DIR" "$CLUSTER_ID_FILE" "$SERVER_PROPS" "$LOG_DIR"
}

# A note before a start that will be slow because of how much the data dir holds.
warn_if_crowded() {
  [[ -d "$KRAFT_DIR" ]] || return 0
  local n
  n="$(find "$KRAFT_DIR" -mindepth 1 -maxdepth 1 -type d -name '*-[0-9]*' ! -name '__cluster_metadata-*' | wc -l)"
  if (( n > WARN_PARTITIONS )); then
    log "WARNING: $KRAFT_DIR holds $n partitions; the broker loads them all before it answers," \
      "so this start may be slow or time out. Start it once with SOLARIS_KAFKA_FRESH=1 to drop" \
      "them (or raise SOLARIS_KAFKA_START_TIMEOUT)."
  fi
}

# --- commands -----------------------------------------------------------------

cmd_start() {
  local pid
  if pid="$(running_pid)"; then
    if ready_check 10 "$pid" >/dev/null 2>&1; then
      log "already running (pid $pid, 127.0.0.1:$PORT)"
      return 0
    fi
    die "broker pid $pid is alive but does not answer on 127.0.0.1:$PORT; run '$0 stop' first"
  fi
  rm -f "$PID_FILE"

  command -v "$JAVA" >/dev/null || die "java not found (JDK 17+ needed)"
  command -v "$PYTHON" >/dev/null || die "python not found: $PYTHON (set SOLARIS_PYTHON)"
  local p
  for p in "$PORT" "$CONTROLLER_PORT"; do
    if port_in_use "$p"; then
      die "port 127.0.0.1:$p is already in use by another process (set SOLARIS_KAFKA_PORT / SOLARIS_KAFKA_CONTROLLER_PORT)"
    fi
  done

  ensure_jars
  local libs
  libs="$(libs_dir)"
  if [[ "$FRESH" == 1 ]]; then
    wipe_data_dir
  else
    warn_if_crowded
  fi
  write_config
  format_storage "$libs"

  local heap_opts
  if [[ "$HEAP" == -* ]]; then
    heap_opts="$HEAP"
  else
    heap_opts="-Xms$HEAP -Xmx$HEAP"
  fi
  local -a jvm
  read -r -a jvm <<<"$heap_opts"
  jvm+=(-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
        -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
        -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$LOG_DIR")

  log "starting broker on 127.0.0.1:$PORT (controller $CONTROLLER_PORT, data $DATA_DIR)"
  local t0=$SECONDS
  {
    echo "===== $(date -u +%Y-%m-%dT%H:%M:%SZ) start ====="
  } >>"$OUT_LOG"
  # setsid: own session, so a Ctrl-C / process-group kill of the caller does not hit it.
  # Without job control the background child is not a group leader, so setsid execs
  # in place and $! is the JVM's PID.
  nohup setsid "$JAVA" "${jvm[@]}" -cp "$libs/*" kafka.Kafka "$SERVER_PROPS" \
    </dev/null >>"$OUT_LOG" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"

  local rc=0
  ready_check "$START_TIMEOUT" "$pid" || rc=$?
  if [[ $rc -eq 0 ]]; then
    log "ready after $((SECONDS - t0))s (pid $pid)"
    return 0
  fi
  if [[ $rc -eq 2 ]]; then
    err "broker process $pid exited during startup"
  else
    err "broker did not answer a METADATA request within ${START_TIMEOUT}s; stopping it"
    stop_pid "$pid"
  fi
  rm -f "$PID_FILE"
  show_log_tail
  exit 1
}

stop_pid() { stop_pid_with is_our_broker "$1" "$STOP_TIMEOUT"; }

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    log "not running (port $PORT)"
    rm -f "$PID_FILE"
    return 0
  fi
  log "stopping broker pid $pid (SIGTERM, up to ${STOP_TIMEOUT}s)"
  stop_pid "$pid"
  rm -f "$PID_FILE"
  log "stopped"
}

cmd_status() {
  local pid
  if ! pid="$(running_pid)"; then
    log "not running (port $PORT, data $DATA_DIR)"
    return 3
  fi
  local cport
  cport="$(sed -n 's/^controller.quorum.voters=1@127.0.0.1://p' "$SERVER_PROPS" 2>/dev/null || true)"
  if ready_check 5 "$pid" >/dev/null 2>&1; then
    log "running: pid $pid, bootstrap 127.0.0.1:$PORT, controller 127.0.0.1:${cport:-?}, ready"
    return 0
  fi
  log "running: pid $pid, bootstrap 127.0.0.1:$PORT, NOT answering metadata requests"
  return 1
}

cmd_logs() {
  [[ -f "$BROKER_LOG" ]] || die "no broker log at $BROKER_LOG"
  if [[ "${1:-}" == "-f" ]]; then
    exec tail -n 100 -F "$BROKER_LOG"
  fi
  tail -n "${SOLARIS_KAFKA_LOG_LINES:-100}" "$BROKER_LOG"
}

# Serialise start/stop on one data dir (the lock fd is closed for the JVM).
lock_data_dir() { lock_dir "$DATA_DIR" 300; }

main() {
  [[ $# -ge 1 ]] || usage
  local cmd="$1"
  shift
  case "$cmd" in
    start|stop) lock_data_dir ;;
  esac
  case "$cmd" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    pid) running_pid ;;
    logs) cmd_logs "$@" ;;
    *) usage ;;
  esac
}

main "$@"
