#!/usr/bin/env bash
# Local Redis for SOLARIS development and CI (Debian's redis-server, no persistence).
#
#   infra/redis.sh start|stop|status
#   infra/redis.sh cluster-start|cluster-stop|cluster-status
#
# cluster-*: a local Redis Cluster of masters without replicas (one redis-server per port,
# created with `redis-cli --cluster create ... --cluster-replicas 0`). For tests and development
# only: no persistence, and cluster-stop deletes the nodes' dirs so the next start is a new cluster.
#
# Env knobs (defaults in brackets):
#   SOLARIS_CACHE_DIR          [$HOME/.cache/solaris]
#   SOLARIS_REDIS_PORT         [6379]  bound to 127.0.0.1
#   SOLARIS_REDIS_DATA_DIR     [$SOLARIS_CACHE_DIR/run/redis-$PORT]  dir, pidfile, logfile
#   SOLARIS_REDIS_START_TIMEOUT [20]   seconds to wait for PING
#   SOLARIS_REDIS_STOP_TIMEOUT  [10]   seconds between SIGTERM and SIGKILL
#   SOLARIS_REDIS_CLUSTER_PORTS ["7000 7001 7002"]  one master per port (at least 3)
#   SOLARIS_REDIS_CLUSTER_DIR   [$SOLARIS_CACHE_DIR/run/redis-cluster]  one subdir per port
set -euo pipefail

CACHE_DIR="${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}"
PORT="${SOLARIS_REDIS_PORT:-6379}"
DATA_DIR="${SOLARIS_REDIS_DATA_DIR:-$CACHE_DIR/run/redis-$PORT}"
START_TIMEOUT="${SOLARIS_REDIS_START_TIMEOUT:-20}"
STOP_TIMEOUT="${SOLARIS_REDIS_STOP_TIMEOUT:-10}"

PID_FILE="$DATA_DIR/redis.pid"
LOG_FILE="$DATA_DIR/redis.log"
OUT_FILE="$DATA_DIR/redis-start.out"
CLUSTER_PORTS="${SOLARIS_REDIS_CLUSTER_PORTS:-7000 7001 7002}"
CLUSTER_DIR="${SOLARIS_REDIS_CLUSTER_DIR:-$CACHE_DIR/run/redis-cluster}"
# extra redis-server options of the node being started (cluster mode sets them)
EXTRA_ARGS=()

LOG_NAME=redis
# shellcheck source=infra/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() {
  echo "usage: $0 start|stop|status|cluster-start|cluster-stop|cluster-status" >&2
  exit 2
}

ensure_redis() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    return 0
  fi
  apt_install redis-server redis-server redis-tools
  command -v redis-server >/dev/null || die "redis-server still not found after install"
  log "installed $(redis-server --version | head -n 1)"
}

# True when $1 is a live (non-zombie) redis-server listening on our port.
is_our_redis() {
  # redis-server rewrites its title to "redis-server 127.0.0.1:PORT" (guards PID reuse).
  proc_alive "$1" && proc_cmdline_has "$1" "redis-server 127.0.0.1:$PORT"
}

running_pid() {
  local pid
  pid="$(read_pid_file "$PID_FILE")" || return 1
  is_our_redis "$pid" || return 1
  echo "$pid"
}

ping() {
  [[ "$(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null)" == "PONG" ]]
}

show_log_tail() { show_tails "$LOG_FILE" "$OUT_FILE"; }

cmd_start() {
  local pid
  ensure_redis
  if pid="$(running_pid)"; then
    if ping; then
      log "already running (pid $pid, 127.0.0.1:$PORT)"
      return 0
    fi
    die "redis pid $pid is alive but does not answer PING on 127.0.0.1:$PORT; run '$0 stop' first"
  fi
  rm -f "$PID_FILE"
  if port_in_use "$PORT"; then
    die "port 127.0.0.1:$PORT is already in use by another process (not ours: no live pid in $PID_FILE); set SOLARIS_REDIS_PORT"
  fi

  mkdir -p "$DATA_DIR"
  log "starting redis-server on 127.0.0.1:$PORT (dir $DATA_DIR)"
  # No config file: built-in defaults plus these options (the Debian package's
  # /etc/redis/redis.conf and its service are not used). fd 9 (our lock) is closed
  # for the daemon.
  if ! redis-server \
      --bind 127.0.0.1 --port "$PORT" --protected-mode yes \
      --daemonize yes --pidfile "$PID_FILE" --logfile "$LOG_FILE" --dir "$DATA_DIR" \
      --save '' --appendonly no --loglevel notice "${EXTRA_ARGS[@]}" \
      </dev/null >"$OUT_FILE" 2>&1 9>&-; then
    show_log_tail
    die "redis-server failed to start"
  fi

  local t0=$SECONDS
  while (( SECONDS - t0 < START_TIMEOUT )); do
    if pid="$(running_pid)" && ping; then
      log "ready (pid $pid)"
      return 0
    fi
    # redis writes its pidfile once it listens; none after 5 s means it died
    # (e.g. a bind error, see the log).
    if (( SECONDS - t0 >= 5 )) && [[ ! -f "$PID_FILE" ]]; then
      err "redis-server exited during startup"
      show_log_tail
      exit 1
    fi
    sleep 0.2
  done
  err "redis did not answer PING on 127.0.0.1:$PORT within ${START_TIMEOUT}s"
  if pid="$(running_pid)"; then
    stop_pid "$pid"
  fi
  rm -f "$PID_FILE"
  show_log_tail
  exit 1
}

stop_pid() { stop_pid_with is_our_redis "$1" "$STOP_TIMEOUT"; }

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    log "not running (port $PORT)"
    rm -f "$PID_FILE"
    return 0
  fi
  log "stopping redis pid $pid"
  stop_pid "$pid"
  rm -f "$PID_FILE"
  log "stopped"
}

cmd_status() {
  local pid
  if ! pid="$(running_pid)"; then
    log "not running (port $PORT, dir $DATA_DIR)"
    return 3
  fi
  if command -v redis-cli >/dev/null && ping; then
    log "running: pid $pid, 127.0.0.1:$PORT, PING ok"
    return 0
  fi
  log "running: pid $pid, 127.0.0.1:$PORT, NOT answering PING"
  return 1
}

# --- cluster mode: the single-node functions above, once per port ------------------------------

# Point the single-node globals at the cluster node on port $1.
use_node() {
  PORT="$1"
  DATA_DIR="$CLUSTER_DIR/$PORT"
  PID_FILE="$DATA_DIR/redis.pid"
  LOG_FILE="$DATA_DIR/redis.log"
  OUT_FILE="$DATA_DIR/redis-start.out"
  EXTRA_ARGS=(--cluster-enabled yes --cluster-config-file "$DATA_DIR/nodes.conf"
              --cluster-node-timeout 5000)
}

# Sets the global array PORTS from SOLARIS_REDIS_CLUSTER_PORTS.
load_cluster_ports() {
  read -r -a PORTS <<<"$CLUSTER_PORTS"
  (( ${#PORTS[@]} >= 3 )) || die "a cluster needs at least 3 masters (SOLARIS_REDIS_CLUSTER_PORTS='$CLUSTER_PORTS')"
}

cluster_info_field() {  # port field -> value from CLUSTER INFO (empty when unreachable)
  redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'
}

cluster_ok_everywhere() {
  local port
  for port in "$@"; do
    [[ "$(cluster_info_field "$port" cluster_state)" == "ok" ]] || return 1
    [[ "$(cluster_info_field "$port" cluster_known_nodes)" == "$#" ]] || return 1
  done
}

cmd_cluster_start() {
  local port nodes=() assigned
  load_cluster_ports
  local ports=("${PORTS[@]}")
  for port in "${ports[@]}"; do
    use_node "$port"
    cmd_start
    nodes+=("127.0.0.1:$port")
  done
  if cluster_ok_everywhere "${ports[@]}"; then
    log "cluster ready: ${nodes[*]}"
    return 0
  fi
  for port in "${ports[@]}"; do
    assigned="$(cluster_info_field "$port" cluster_slots_assigned)"
    [[ "$assigned" == "0" ]] || die "node 127.0.0.1:$port already belongs to a cluster that is not ok (slots assigned: ${assigned:-?}); run '$0 cluster-stop' first"
  done
  log "creating a cluster of ${#nodes[@]} masters: ${nodes[*]}"
  if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
      >"$CLUSTER_DIR/create.out" 2>&1; then
    tail -n 20 "$CLUSTER_DIR/create.out" >&2
    die "redis-cli --cluster create failed (full output: $CLUSTER_DIR/create.out)"
  fi
  local t0=$SECONDS
  while (( SECONDS - t0 < START_TIMEOUT )); do
    if cluster_ok_everywhere "${ports[@]}"; then
      log "cluster ready: ${nodes[*]}"
      return 0
    fi
    sleep 0.2
  done
  die "cluster did not reach cluster_state:ok on every node within ${START_TIMEOUT}s"
}

cmd_cluster_stop() {
  local port
  load_cluster_ports
  local ports=("${PORTS[@]}")
  for port in "${ports[@]}"; do
    use_node "$port"
    cmd_stop
    rm -f "$DATA_DIR/nodes.conf"
  done
}

cmd_cluster_status() {
  local port pid down=0
  load_cluster_ports
  local ports=("${PORTS[@]}")
  for port in "${ports[@]}"; do
    use_node "$port"
    if ! pid="$(running_pid)"; then
      log "node 127.0.0.1:$port not running"
      down=1
    fi
  done
  (( down == 0 )) || return 3
  if cluster_ok_everywhere "${ports[@]}"; then
    log "cluster running: ${#ports[@]} masters on 127.0.0.1 ports ${ports[*]}, cluster_state ok"
    return 0
  fi
  log "cluster nodes running on ports ${ports[*]} but cluster_state is not ok on every node"
  return 1
}

lock_cluster_dir() { lock_dir "$CLUSTER_DIR" 60; }

lock_data_dir() { lock_dir "$DATA_DIR" 60; }

main() {
  [[ $# -ge 1 ]] || usage
  local cmd="$1"
  shift
  case "$cmd" in
    start)
      lock_data_dir
      cmd_start
      ;;
    stop)
      lock_data_dir
      cmd_stop
      ;;
    status) cmd_status ;;
    cluster-start)
      ensure_redis
      lock_cluster_dir
      cmd_cluster_start
      ;;
    cluster-stop)
      lock_cluster_dir
      cmd_cluster_stop
      ;;
    cluster-status) cmd_cluster_status ;;
    *) usage ;;
  esac
}

main "$@"
