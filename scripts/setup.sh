#!/usr/bin/env bash
# One-time, idempotent set-up: virtual environment + pinned packages + a GPU for LiteRT.
#   ./scripts/setup.sh            (called by demo.sh and test.sh; safe to run again: completed steps are skipped)
# Environment: LITERT_VENV (default .venv), PYTHON (default python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${LITERT_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
say() { printf '[setup] %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"; else return 77; fi; }

# 1. virtual environment (python3-venv is a separate package on Debian/Ubuntu)
if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
    say "python venv module missing; installing python3-venv"
    as_root apt-get install -y -q python3-venv || { say "install python3-venv (apt) and re-run"; exit 1; }
  fi
  say "creating virtual environment in ${VENV#$ROOT/}"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

# 2. packages, re-installed only when a requirements file changed
stamp="$VENV/.litert-setup.sha256"
want="$(cat requirements.txt requirements-nodeps.txt pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing pinned packages (first run: a few minutes)"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q -r requirements.txt
  "$PY" -m pip install -q --no-deps -r requirements-nodeps.txt
  "$PY" -m pip install -q --no-deps --no-build-isolation -e .
  echo "$want" > "$stamp"
else
  say "packages up to date"
fi

# 3. a GPU adapter for LiteRT's WebGPU accelerator; on a machine without one, Mesa's software Vulkan
if "$PY" -m litert_gpu_toolkit gpu-info; then
  :
else
  rc=$?
  if [ "$rc" = 2 ]; then
    say "no usable Vulkan adapter: installing the software GPU (Mesa lavapipe)"
    if as_root "$PY" scripts/install_software_gpu.py; then
      "$PY" -m litert_gpu_toolkit gpu-info || say "still no GPU adapter; GPU tests will skip (or fail under LITERT_GPU_REQUIRED=1)"
    else
      "$PY" scripts/install_software_gpu.py --dry-run || true
      say "could not install the software GPU (needs root and apt); continuing without a GPU"
    fi
  else
    say "GPU probe failed (status $rc); continuing"
  fi
fi

# 4. the native runner (--device host-native): the phone's runner (LiteRT C API) compiled for this machine against
#    the wheel's libLiteRt.so, into build/host-runner/ (ignored); skipped in a second when up to date; no network
if ! command -v "${CXX:-g++}" >/dev/null && ! command -v c++ >/dev/null; then
  as_root bash -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++ >/dev/null' \
    && say "installed g++ (for the native runner)" || say "no C++ compiler and no apt as root: install g++ for --device host-native"
fi
"$PY" -m litert_gpu_toolkit.phone.native || say "native runner not built; --device host-native will say why"

# 5. speech synthesiser for the audio recipes' offline test inputs (optional)
if ! command -v espeak-ng >/dev/null; then
  as_root bash -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends espeak-ng >/dev/null' \
    && say "installed espeak-ng" || say "espeak-ng not installed (audio recipes need it for test speech)"
fi
say "done"
