#!/usr/bin/env bash
# The zoo's environment: .venv-zoo, layered on the project venv, plus zoo/requirements.txt.
#   ./zoo/setup.sh            (idempotent; ./scripts/setup.sh first makes .venv)
# Why a second venv: torchvision from PyPI fails to import beside the CPU torch unless placeholder ops are
# defined first, and transformers imports torchvision whenever it is installed, so torchvision in .venv would
# break every recipe. .venv-zoo sees .venv's packages (a .pth that adds its site-packages) and adds the
# zoo's libraries on top; the project venv is never changed.
# Environment: LITERT_VENV (default .venv), LITERT_ZOO_VENV (default .venv-zoo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BASE="${LITERT_VENV:-$ROOT/.venv}"
ZVENV="${LITERT_ZOO_VENV:-$ROOT/.venv-zoo}"
say() { printf '[zoo setup] %s\n' "$*"; }
[ -x "$BASE/bin/python" ] || { say "no project venv at $BASE: run ./scripts/setup.sh first"; exit 1; }
if [ ! -x "$ZVENV/bin/python" ]; then
  say "creating ${ZVENV#$ROOT/} on top of ${BASE#$ROOT/}"
  "$BASE/bin/python" -c 'import sys; print(sys.base_prefix)' >/dev/null
  "$(cd "$BASE" && "$BASE/bin/python" -c 'import sys; print(sys._base_executable)')" -m venv "$ZVENV"
fi
base_site="$("$BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
zoo_site="$("$ZVENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# addsitedir (not a bare path) so the base venv's own .pth files -- the editable toolkit -- are read too
printf 'import site; site.addsitedir(%s)\n' "'$base_site'" > "$zoo_site/_litert_base_venv.pth"
stamp="$ZVENV/.litert-zoo-setup.sha256"
want="$(cat zoo/requirements.txt "$BASE/.litert-setup.sha256" 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing zoo/requirements.txt"
  "$ZVENV/bin/python" -m pip install -q -r zoo/requirements.txt
  echo "$want" > "$stamp"
else
  say "packages up to date"
fi
"$ZVENV/bin/python" -c 'import torch, transformers, litert_gpu_toolkit; print("[zoo setup] torch", torch.__version__)'
