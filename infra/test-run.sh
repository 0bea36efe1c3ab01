#!/usr/bin/env bash
# The Python 3.11 part of `make test` (run inside infra/with-services.sh): every test but the
# `timing` ones on several processes (pytest-xdist), then the `timing` tests alone in one.
#
# The suite mostly waits on brokers, workers and timeouts: in one process it kept the 2 cores
# ~40 % busy for 25 min. A test file stays in one process (`--dist loadfile`: a module's own
# broker or Redis starts once). Tests marked `timing` assert wall-clock bounds of a few ms (read
# deadlines, failover bounds); beside other test processes a loaded machine breaks them (seen:
# a fresh reader's connections to a delay proxy not open in time), so they run on their own.
# Tests marked `alone` run there too (see the marker's reason at the test).
# Usage: bash infra/test-run.sh WORKERS PYTHON [PYTEST_ARGS...]; WORKERS 0 = everything in one
# process. (Not an environment variable: Settings refuses unknown SOLARIS_* ones.)
set -euo pipefail

# A run that stops making progress (seen: pytest-xdist waiting for ever on a worker that died
# while children it had started still held its pipes) must fail inside CI's budget, not use it
# up: each pytest run gets a wall-clock limit (the whole suite takes ~15 min; CI allows 90).
RUN_LIMIT_S=${TEST_RUN_LIMIT_S:-2700}
limited() {
  local rc=0
  timeout --kill-after=60 "$RUN_LIMIT_S" "$@" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "[test-run] pytest did not finish within ${RUN_LIMIT_S}s: stopped (a hung run is a failure)" >&2
  fi
  return "$rc"
}

workers=$1 py=$2
shift 2
if [ "$workers" = 0 ]; then
  limited "$py" -m pytest -p no:xdist "$@"
  exit $?
fi
rc=0 timing_rc=0
limited "$py" -m pytest -n "$workers" --dist loadfile -m "not timing and not alone" "$@" || rc=$?
limited "$py" -m pytest -p no:xdist -m "timing or alone" "$@" || timing_rc=$?
# exit code 5 there: PYTEST_ARGS chose no `timing` test (e.g. one unit test file), not a failure
[ "$timing_rc" = 5 ] && timing_rc=0
[ "$rc" != 0 ] && exit "$rc"
exit "$timing_rc"
