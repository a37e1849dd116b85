#!/usr/bin/env bash
# Run the test suite from a fresh clone: set up (tools/setup.sh), then pytest.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec .venv/bin/python -m pytest "$@"
