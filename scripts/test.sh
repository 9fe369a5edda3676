#!/usr/bin/env bash
# The test suite, set-up included:  ./scripts/test.sh [pytest args]
# Under LITERT_GPU_REQUIRED=1 (CI) GPU tests fail instead of skipping when no GPU adapter is found.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "${LITERT_VENV:-$ROOT/.venv}/bin/python" -m pytest "$@"
