#!/usr/bin/env bash
# Shared helpers of the infra/ scripts (sourced, never run). Set LOG_NAME before sourcing:
# messages are prefixed "[LOG_NAME]". Each service script keeps only what is its own
# (how to start it, how to tell it is ready, what its command line looks like).

log() { echo "[$LOG_NAME] $*"; }
err() { echo "[$LOG_NAME] ERROR: $*" >&2; }
die() { err "$*"; exit 1; }

# apt_install WHAT PACKAGE... : install Debian packages once, with a retry after apt-get update.
# WHAT names the thing in messages. Needs root or sudo; the full apt output is kept on failure.
apt_install() {
  local what="$1"
  shift
  command -v apt-get >/dev/null || die "$what is missing and apt-get is not available"
  local sudo=()
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || die "$what is missing; installing it needs root or sudo"
    sudo=(sudo)
  fi
  log "installing $* with apt-get (one-time)..."
  local apt_log
  apt_log="$(mktemp "/tmp/solaris-$LOG_NAME-apt.XXXXXX")"
  export DEBIAN_FRONTEND=noninteractive
  # --no-install-recommends: the package only, no services or desktop integration with it.
  if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@" >"$apt_log" 2>&1; then
    log "install failed; running apt-get update and retrying"
    if ! { "${sudo[@]}" apt-get update -q && \
           "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@"; } \
        >>"$apt_log" 2>&1; then
      tail -n 20 "$apt_log" >&2
      die "apt-get could not install $* (full output: $apt_log)"
    fi
  fi
  rm -f "$apt_log"
}

# read_pid_file FILE : the pid written in FILE (fails when absent or empty).
read_pid_file() {
  [[ -f "$1" ]] || return 1
  local pid
  pid="$(tr -cd '0-9' <"$1")"
  [[ -n "$pid" ]] || return 1
  echo "$pid"
}

# proc_alive PID : a live process, not a zombie.
proc_alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != "Z" ]]
}

# proc_cmdline_has PID TEXT : the process's command line contains TEXT (guards against PID reuse).
proc_cmdline_has() {
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# port_in_use PORT : something accepts connections on 127.0.0.1:PORT (bash's /dev/tcp).
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# stop_pid_with IS_OURS PID TIMEOUT_S : SIGTERM, wait up to TIMEOUT_S while `IS_OURS PID`
# holds, then SIGKILL and wait up to 10 s more. IS_OURS is the script's own check.
stop_pid_with() {
  local is_ours="$1" pid="$2" timeout_s="$3" waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while "$is_ours" "$pid"; do
    if (( waited >= timeout_s * 5 )); then
      err "pid $pid still alive after ${timeout_s}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      waited=0
      while "$is_ours" "$pid" && (( waited < 50 )); do
        sleep 0.2
        waited=$((waited + 1))
      done
      return 0
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
}

# show_tails FILE... : the last 40 lines of each non-empty FILE, on stderr (after a failed start).
show_tails() {
  local f
  for f in "$@"; do
    if [[ -s "$f" ]]; then
      echo "[$LOG_NAME] ----- last 40 lines of $f -----" >&2
      tail -n 40 "$f" >&2
    fi
  done
}

# lock_dir DIR TIMEOUT_S : serialise start/stop on DIR through fd 9 (held until the script
# exits; daemons are started with 9>&- so they do not inherit it).
lock_dir() {
  mkdir -p "$1"
  exec 9>"$1/.lock"
  flock -w "$2" 9 || die "timed out waiting for the lock on $1"
}
