#!/usr/bin/env bash
# The test suite, set-up included.
#   ./scripts/test.sh                               lint (ruff), then the fast lane, then the GPU and slow tests
#   ./scripts/test.sh -m "not gpu and not slow"     the fast lane alone (a few minutes; no GPU needed)
#   ./scripts/test.sh ARGS...                       any other pytest arguments, passed as they are
# Under LITERT_GPU_REQUIRED=1 (CI) GPU tests fail instead of skipping when no GPU adapter is found.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
PY="${LITERT_VENV:-$ROOT/.venv}/bin/python"
if [ "$#" -gt 0 ]; then
  exec "$PY" -m pytest "$@"
fi
echo "[test] lint: ruff check"
"$PY" -m ruff check .
echo "[test] fast lane: -m 'not gpu and not slow'"
"$PY" -m pytest -m "not gpu and not slow"
echo "[test] GPU and slow tests: -m 'gpu or slow'"
"$PY" -m pytest -m "gpu or slow"
