#!/usr/bin/env bash
# Headless Chromium for the demo report's rendering test (Debian's `chromium` package).
#
#   infra/chromium.sh install|path|status
#
# `install` installs the package with apt-get once (like infra/redis.sh installs redis-server);
# `path` installs if needed and prints the browser's path (what tests run); `status` prints the
# path and version, or exits 1 when Chromium is not installed. Nothing is started or left running:
# callers run `chromium --headless ...` themselves, one process per call
# (streams/report_html/browser.py).
set -euo pipefail

log() { echo "[chromium] $*" >&2; }
err() { echo "[chromium] ERROR: $*" >&2; }
die() { err "$*"; exit 1; }

usage() {
  echo "usage: $0 install|path|status" >&2
  exit 2
}

find_chromium() {
  local name
  for name in chromium chromium-browser; do
    if command -v "$name" >/dev/null; then
      command -v "$name"
      return 0
    fi
  done
  return 1
}

ensure_chromium() {
  if find_chromium >/dev/null; then
    return 0
  fi
  command -v apt-get >/dev/null || die "chromium is missing and apt-get is not available"
  local sudo=()
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || die "chromium is missing; installing it needs root or sudo"
    sudo=(sudo)
  fi
  log "installing chromium with apt-get (one-time, ~100 MB)..."
  local apt_log
  apt_log="$(mktemp /tmp/solaris-chromium-apt.XXXXXX)"
  export DEBIAN_FRONTEND=noninteractive
  # --no-install-recommends: the headless browser only (no desktop integration, no sandbox
  # helper: tests run it with --no-sandbox as they run as root in CI containers).
  if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends chromium >"$apt_log" 2>&1; then
    log "install failed; running apt-get update and retrying"
    if ! { "${sudo[@]}" apt-get update -q && \
           "${sudo[@]}" apt-get install -y -q --no-install-recommends chromium; } \
        >>"$apt_log" 2>&1; then
      tail -n 20 "$apt_log" >&2
      die "apt-get could not install chromium (full output: $apt_log)"
    fi
  fi
  rm -f "$apt_log"
  find_chromium >/dev/null || die "chromium still not found after install"
  log "installed $("$(find_chromium)" --version 2>/dev/null | head -n 1)"
}

cmd="${1:-}"
case "$cmd" in
  install)
    ensure_chromium
    ;;
  path)
    ensure_chromium
    find_chromium
    ;;
  status)
    if bin="$(find_chromium)"; then
      echo "$bin: $("$bin" --version 2>/dev/null | head -n 1)"
    else
      echo "chromium: not installed (infra/chromium.sh install)"
      exit 1
    fi
    ;;
  *)
    usage
    ;;
esac
