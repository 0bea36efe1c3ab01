#!/usr/bin/env bash
# Headless Chromium for the demo report's rendering test (Debian's `chromium` package).
#
#   infra/chromium.sh install|path|status
#
# `install` installs the package with apt-get once (like infra/redis.sh installs redis-server);
# `path` installs if needed and prints the browser's path (what tests run); `status` prints the
# path and version, or exits 1 when Chromium is not installed. Nothing is started or left running:
# callers run `chromium --headless ...` themselves, one process per call
# (streams/app/report_html/browser.py).
set -euo pipefail

LOG_NAME=chromium
# shellcheck source=infra/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# `path` prints the browser's path on stdout: every message goes to stderr
log() { echo "[$LOG_NAME] $*" >&2; }

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
  # ~100 MB; the headless browser only (no sandbox helper: tests run it with --no-sandbox as
  # they run as root in CI containers)
  apt_install chromium chromium
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
