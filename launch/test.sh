#!/usr/bin/env bash
# Set up (launch/setup.sh) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# --durations: the CI log names the slowest tests (CI must stay under 30 minutes on a 2-core machine)
exec python -m pytest -q --durations=25 "$@"
