#!/usr/bin/env bash
# The Python 3.11 part of `make test` (run inside infra/with-services.sh): every test but the
# `timing` ones on several processes (pytest-xdist), then the `timing` tests alone in one.
#
# The suite mostly waits on brokers, workers and timeouts: in one process it kept the 2 cores
# ~40 % busy for 25 min. A test file stays in one process (`--dist loadfile`: a module's own
# broker or Redis starts once). Tests marked `timing` assert wall-clock bounds of a few ms (read
# deadlines, failover bounds); beside other test processes a loaded machine breaks them (seen:
# a fresh reader's connections to a delay proxy not open in time), so they run on their own.
# Usage: bash infra/test-run.sh WORKERS PYTHON [PYTEST_ARGS...]; WORKERS 0 = everything in one
# process. (Not an environment variable: Settings refuses unknown SOLARIS_* ones.)
set -euo pipefail

workers=$1 py=$2
shift 2
if [ "$workers" = 0 ]; then
  exec "$py" -m pytest -p no:xdist "$@"
fi
rc=0 timing_rc=0
"$py" -m pytest -n "$workers" --dist loadfile -m "not timing" "$@" || rc=$?
"$py" -m pytest -p no:xdist -m timing "$@" || timing_rc=$?
# exit code 5 there: PYTEST_ARGS chose no `timing` test (e.g. one unit test file), not a failure
[ "$timing_rc" = 5 ] && timing_rc=0
[ "$rc" != 0 ] && exit "$rc"
exit "$timing_rc"
