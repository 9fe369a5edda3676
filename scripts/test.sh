#!/usr/bin/env bash
# The test suite, set-up included.
#   ./scripts/test.sh                               lint (ruff), then the fast lane, then the GPU and slow tests
#   ./scripts/test.sh -m "not gpu and not slow"     the fast lane alone (under 3 minutes on 2 cores; no GPU needed)
#   ./scripts/test.sh -m sweep                      the architecture sweeps (the zoo covers them; not in CI)
#   ./scripts/test.sh ARGS...                       any other pytest arguments, passed as they are
# Under LITERT_GPU_REQUIRED=1 (CI) GPU tests fail instead of skipping when no GPU adapter is found.
# Workers (pytest-xdist): the fast lane uses LITERT_TEST_WORKERS processes (default 2); the GPU and slow lane
# uses LITERT_SLOW_WORKERS (default 2) with --dist loadfile, so a test file's module fixtures (a recipe's
# exported graphs) are built once, in one process. Two full-size conversions at once fit the 24 GiB of CI's
# machine; set LITERT_SLOW_WORKERS=1 on a smaller one. The slow lane prints its
# 30 slowest tests, so a CI log shows where the time went. Pass -n yourself to choose.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/zoo/setup.sh"          # .venv-zoo: the zoo's libraries (tests/zoo runs its CI subset there)
cd "$ROOT"
PY="${LITERT_VENV:-$ROOT/.venv}/bin/python"
WORKERS="${LITERT_TEST_WORKERS:-2}"
SLOW_WORKERS="${LITERT_SLOW_WORKERS:-2}"
if [ "$#" -gt 0 ]; then
  case " $* " in
    *" -n "*|*" -n"[0-9]*|*"--numprocesses"*) exec "$PY" -m pytest "$@" ;;
    *"not gpu"*) exec "$PY" -m pytest -n "$WORKERS" "$@" ;;
    *) exec "$PY" -m pytest "$@" ;;
  esac
fi
echo "[test] lint: ruff check"
"$PY" -m ruff check .
echo "[test] fast lane: -m 'not gpu and not slow' on $WORKERS workers"
"$PY" -m pytest -n "$WORKERS" -m "not gpu and not slow"
echo "[test] GPU and slow tests: -m '(gpu or slow) and not sweep' on $SLOW_WORKERS workers"
"$PY" -m pytest -n "$SLOW_WORKERS" --dist loadfile --durations=30 -m "(gpu or slow) and not sweep"
