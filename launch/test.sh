#!/usr/bin/env bash
# Set up (launch/setup.sh) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
exec python -m pytest -q "$@"
