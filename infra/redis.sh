#!/usr/bin/env bash
# Local Redis for SOLARIS development and CI (Debian's redis-server, no persistence).
#
#   infra/redis.sh start|stop|status|pid   (pid: the running server's, or exit 1)
#   infra/redis.sh cluster-start|cluster-stop|cluster-status
#
# cluster-*: a local Redis Cluster, one redis-server per port, created with `redis-cli --cluster
# create ... --cluster-replicas R`: by default 3 masters without replicas; with
# SOLARIS_REDIS_CLUSTER_REPLICAS=1, 3 masters + 3 replicas (6 ports; cluster-start returns once
# every replica's link to its master is up and its initial sync done; cluster-status lists the
# roles). For tests and development only: no persistence, and cluster-stop deletes the nodes'
# nodes.conf so the next start is a new cluster.
#
# Env knobs (defaults in brackets):
#   SOLARIS_CACHE_DIR          [$HOME/.cache/solaris]
#   SOLARIS_REDIS_PORT         [6379]  bound to 127.0.0.1
#   SOLARIS_REDIS_DATA_DIR     [$SOLARIS_CACHE_DIR/run/redis-$PORT]  dir, pidfile, logfile
#   SOLARIS_REDIS_START_TIMEOUT [20]   seconds to wait for PING
#   SOLARIS_REDIS_STOP_TIMEOUT  [10]   seconds between SIGTERM and SIGKILL
#   SOLARIS_REDIS_CLUSTER_REPLICAS [0]  replicas per master
#   SOLARIS_REDIS_CLUSTER_PORTS ["7000 7001 7002"; with replicas 7000..7000+3*(1+R)-1]  one node
#                               per port: at least 3 masters, (1 + R) nodes per master
#   SOLARIS_REDIS_CLUSTER_DIR   [$SOLARIS_CACHE_DIR/run/redis-cluster]  one subdir per port
#   SOLARIS_REDIS_CLUSTER_NODE_TIMEOUT_MS [5000]  cluster-node-timeout: a master unreachable this
#                               long is marked failed and its replica promoted
set -euo pipefail

CACHE_DIR="${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}"
PORT="${SOLARIS_REDIS_PORT:-6379}"
DATA_DIR="${SOLARIS_REDIS_DATA_DIR:-$CACHE_DIR/run/redis-$PORT}"
START_TIMEOUT="${SOLARIS_REDIS_START_TIMEOUT:-20}"
STOP_TIMEOUT="${SOLARIS_REDIS_STOP_TIMEOUT:-10}"

PID_FILE="$DATA_DIR/redis.pid"
LOG_FILE="$DATA_DIR/redis.log"
OUT_FILE="$DATA_DIR/redis-start.out"
CLUSTER_REPLICAS="${SOLARIS_REDIS_CLUSTER_REPLICAS:-0}"
if [[ -n "${SOLARIS_REDIS_CLUSTER_PORTS:-}" ]]; then
  CLUSTER_PORTS="$SOLARIS_REDIS_CLUSTER_PORTS"
else
  _replicas="${CLUSTER_REPLICAS//[^0-9]/}"  # validated in load_cluster_ports
  CLUSTER_PORTS="$(seq -s ' ' 7000 $(( 7000 + 3 * (1 + ${_replicas:-0}) - 1 )))"
fi
CLUSTER_NODE_TIMEOUT_MS="${SOLARIS_REDIS_CLUSTER_NODE_TIMEOUT_MS:-5000}"
CLUSTER_DIR="${SOLARIS_REDIS_CLUSTER_DIR:-$CACHE_DIR/run/redis-cluster}"
# extra redis-server options of the node being started (cluster mode sets them)
EXTRA_ARGS=()

LOG_NAME=redis
# shellcheck source=infra/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() {
  echo "usage: $0 start|stop|status|pid|cluster-start|cluster-stop|cluster-status" >&2
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
              --cluster-node-timeout "$CLUSTER_NODE_TIMEOUT_MS")
}

# Sets the global array PORTS from SOLARIS_REDIS_CLUSTER_PORTS.
load_cluster_ports() {
  [[ "$CLUSTER_REPLICAS" =~ ^[0-9]+$ ]] || die "SOLARIS_REDIS_CLUSTER_REPLICAS='$CLUSTER_REPLICAS' is not a count"
  read -r -a PORTS <<<"$CLUSTER_PORTS"
  local per=$(( 1 + CLUSTER_REPLICAS ))
  (( ${#PORTS[@]} >= 3 * per && ${#PORTS[@]} % per == 0 )) \
    || die "$CLUSTER_REPLICAS replica(s) per master need a multiple of $per ports, at least $(( 3 * per )) (SOLARIS_REDIS_CLUSTER_PORTS='$CLUSTER_PORTS')"
}

info_field() {  # port section field -> value from INFO <section> (empty when unreachable)
  redis-cli -h 127.0.0.1 -p "$1" info "$2" 2>/dev/null | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'
}

# True when every replica among the ports has its master link up and no sync in progress.
replicas_in_sync() {
  local port
  for port in "$@"; do
    [[ "$(info_field "$port" replication role)" == "slave" ]] || continue
    [[ "$(info_field "$port" replication master_link_status)" == "up" ]] || return 1
    [[ "$(info_field "$port" replication master_sync_in_progress)" == "0" ]] || return 1
  done
}

# True when the cluster has the expected number of masters and replicas (as seen from $1).
roles_complete() {
  local nodes masters replicas
  nodes="$(redis-cli -h 127.0.0.1 -p "$1" cluster nodes 2>/dev/null)" || return 1
  masters="$(awk '$3 ~ /master/ && $3 !~ /fail/' <<<"$nodes" | wc -l)"
  replicas="$(awk '$3 ~ /slave/ && $3 !~ /fail/' <<<"$nodes" | wc -l)"
  (( masters == $# / (1 + CLUSTER_REPLICAS) && replicas == $# - masters ))
}

cluster_ready() {  # ports... -> every node ok, every replica attached and in sync
  cluster_ok_everywhere "$@" && roles_complete "$@" && replicas_in_sync "$@"
}

# One line per node: its port, role and (replicas) master and link state.
show_roles() {
  local port role
  for port in "$@"; do
    role="$(info_field "$port" replication role)"
    if [[ "$role" == "slave" ]]; then
      log "  127.0.0.1:$port replica of $(info_field "$port" replication master_host):$(info_field "$port" replication master_port), link $(info_field "$port" replication master_link_status)"
    else
      log "  127.0.0.1:$port ${role:-unreachable}"
    fi
  done
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
  if cluster_ready "${ports[@]}"; then
    log "cluster ready: ${nodes[*]}"
    (( CLUSTER_REPLICAS == 0 )) || show_roles "${ports[@]}"
    return 0
  fi
  local members=0
  for port in "${ports[@]}"; do
    assigned="$(cluster_info_field "$port" cluster_slots_assigned)"
    [[ "$assigned" == "0" ]] || members=$(( members + 1 ))
  done
  if (( members == ${#ports[@]} )); then
    # every node knows the cluster (nodes.conf kept): a node was restarted, e.g. a killed master
    # rejoining as a replica; wait for it to be ready instead of creating a new cluster
    log "every node already belongs to the cluster; waiting for it to be ready"
  elif (( members > 0 )); then
    die "$members of ${#ports[@]} nodes already belong to a cluster that is not ok; run '$0 cluster-stop' first"
  else
    log "creating a cluster of ${#nodes[@]} nodes ($CLUSTER_REPLICAS replica(s) per master): ${nodes[*]}"
    if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$CLUSTER_REPLICAS" --cluster-yes \
        >"$CLUSTER_DIR/create.out" 2>&1; then
      tail -n 20 "$CLUSTER_DIR/create.out" >&2
      die "redis-cli --cluster create failed (full output: $CLUSTER_DIR/create.out)"
    fi
  fi
  local t0=$SECONDS
  while (( SECONDS - t0 < START_TIMEOUT )); do
    if cluster_ready "${ports[@]}"; then
      log "cluster ready: ${nodes[*]}"
      (( CLUSTER_REPLICAS == 0 )) || show_roles "${ports[@]}"
      return 0
    fi
    sleep 0.2
  done
  show_roles "${ports[@]}"
  die "cluster did not reach cluster_state:ok on every node (and every replica in sync) within ${START_TIMEOUT}s"
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
  if cluster_ready "${ports[@]}"; then
    log "cluster running: ${#ports[@]} nodes on 127.0.0.1 ports ${ports[*]}, cluster_state ok"
    (( CLUSTER_REPLICAS == 0 )) || show_roles "${ports[@]}"
    return 0
  fi
  log "cluster nodes running on ports ${ports[*]} but cluster_state is not ok on every node (or a replica is missing or not in sync)"
  show_roles "${ports[@]}"
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
    pid) running_pid ;;
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
