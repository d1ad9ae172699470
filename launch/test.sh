#!/usr/bin/env bash
# Set up (launch/setup.sh) and run the test suite.
#   no arguments: three passes; all of them run, and the exit status fails if any failed.
#     1. the unit tests (not marked slow or multihost) on every core: pytest-xdist, a file's tests on one worker,
#        one torch thread a worker;
#     2. the slow tests that are not multihost (Ray clusters and worker processes on this machine) on every core
#        too: they mostly wait on start-up, and each takes free ports and temporary folders of its own;
#     3. the multihost tests one at a time: they share the network namespaces' fixed addresses.
#   arguments:    one plain pytest run with them (e.g. -m "not slow and not multihost", a test file, -n 2).
#   GCAD_TEST_WORKERS=N  workers of passes 1 and 2 (default: the cores, at most 8; 1: every test one at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${GCAD_TEST_WORKERS:-$(nproc)}
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || { echo "GCAD_TEST_WORKERS: a whole number of at least 1, got '$workers'" >&2; exit 2; }
bash launch/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# --durations: the CI log names the slowest tests (CI must stay under 30 minutes on a 2-core machine)
[ $# -gt 0 ] && exec python -m pytest -q --durations=25 "$@"
[ "$workers" -gt 8 ] && workers=8
failed=0
run_pass() {  # run_pass NAME XDIST-MODE THREADS PYTEST-ARGS...: one pass; a failure is counted, not fatal
  local name=$1 mode=$2 threads=$3 rc=0
  shift 3
  local spread=(-p no:xdist) vars=()
  if [ "$workers" -gt 1 ] && [ "$mode" != serial ]; then spread=(-n "$workers" --dist "$mode"); fi
  [ -n "$threads" ] && vars=("OMP_NUM_THREADS=$threads")
  echo "[test] pass $name"
  env "${vars[@]}" python -m pytest -q --durations=15 "${spread[@]}" "$@" || rc=$?
  echo "[test] pass $name: exit $rc"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
# pass 1's workers must not oversubscribe the cores: one torch thread each, unless OMP_NUM_THREADS says otherwise
unit_threads=${OMP_NUM_THREADS:-}
[ "$workers" -gt 1 ] && unit_threads=${unit_threads:-1}
run_pass "1 of 3 (unit tests, $workers worker(s))" loadfile "$unit_threads" -m "not slow and not multihost"
run_pass "2 of 3 (slow, not multihost, $workers worker(s))" load "" -m "slow and not multihost"
run_pass "3 of 3 (multihost, one at a time)" serial "" -m multihost
echo "[test] $failed of 3 passes failed"
[ "$failed" -eq 0 ]
