#!/usr/bin/env bash
# Re-run recipes end to end (export -> dump -> verify on every device their README tables show), so that every
# record in their results.json comes from the code as it is now, with the graph's provenance.
#   ./scripts/rerun_recipes.sh                    every recipe (slow: about 65 min on 2 shared cores, SmolLM2 most)
#   ./scripts/rerun_recipes.sh mobilenet_v2 mtcnn some of them (names: the folders under models/<family>/)
# Then `python scripts/gen_docs.py` refreshes the READMEs' tables. Each step stops the script on failure
# (a verify that exits 1 has still recorded its run: its failing gates are the result).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${LITERT_VENV:-$ROOT/.venv}/bin/python"
DEVICES=(cpu host-gpu host-gpu-fp32)

step() { echo "[rerun] $(basename "$(dirname "$PWD")"): $*"; "$PY" "$@"; }
verify() { step "$@" || [ $? = 1 ]; }   # exit 1 = gates failed, recorded: a result, not a broken run

mobilenet_v2() {
  step export_classifier.py
  step dump_classifier_ref.py
  for d in "${DEVICES[@]}"; do verify verify_classifier.py --device "$d"; done
}
all_minilm_l6_v2() {
  step export_encoder.py
  step dump_encoder_ref.py
  for d in "${DEVICES[@]}"; do verify verify_encoder.py --device "$d"; done
  step export_encoder.py --plain
  verify verify_encoder.py --model artifacts/encoder_plain.tflite
  step export_encoder.py --fp16-weights
  verify verify_encoder.py --model artifacts/encoder_fp16w.tflite
  step export_encoder.py --fp16-weights all
  verify verify_encoder.py --model artifacts/encoder_fp16w_all.tflite
}
fcpe() {
  step export_pitch.py
  step dump_pitch_ref.py
  for d in "${DEVICES[@]}" host-native; do verify verify_pitch.py --device "$d"; done
}
openwakeword() {
  step export_oww.py
  step dump_oww_ref.py
  for d in "${DEVICES[@]}" host-native; do verify verify_oww.py --device "$d"; done
  verify verify_oww.py --fp32-graphs mel
}
mtcnn() {
  step export_mtcnn.py
  step dump_mtcnn_ref.py
  for d in "${DEVICES[@]}"; do verify verify_mtcnn.py --device "$d"; done
}
silero_vad() {
  step export_vad.py
  step dump_vad_ref.py
  for d in "${DEVICES[@]}"; do verify verify_vad.py --device "$d"; done
}
realesrgan_animevideov3() {
  step export_sr.py --scale 4 --tile 64
  step dump_sr_ref.py --scale 4 --tile 64
  verify verify_sr.py --scale 4 --tile 64 --device cpu
  verify verify_sr.py --scale 4 --tile 64
  step export_sr.py --scale 3 --tile 64
  step dump_sr_ref.py --scale 3 --tile 64
  verify verify_sr.py --scale 3 --tile 64
}
hifigan() {
  step export_vocoder.py
  step dump_vocoder_ref.py
  for d in "${DEVICES[@]}"; do verify verify_vocoder.py --device "$d"; done
}
ppocr_det() {
  step export_det.py
  step dump_det_ref.py
  for d in host-gpu cpu; do verify verify_det.py --device "$d"; done
  local small=(--height 320 --width 480) plan=artifacts/det_320x480_fp32-p2o_Relu_10
  step export_det.py "${small[@]}"
  step dump_det_ref.py "${small[@]}"
  for d in "${DEVICES[@]}" host-native; do verify verify_det.py "${small[@]}" --device "$d"; done
  step export_det.py "${small[@]}" --fp32-until p2o/Relu/10
  for d in host-gpu host-native; do verify verify_det.py "${small[@]}" --plan "$plan/plan.json" --device "$d"; done
}
xfeat() {
  step export_extractor.py
  step dump_extractor_ref.py
  for d in "${DEVICES[@]}" host-native; do verify verify_extractor.py --device "$d"; done
  step export_matcher.py --fp32-from 2
  step export_matcher.py --plain-attention
  step dump_matcher_ref.py
  for d in "${DEVICES[@]}"; do verify verify_matcher.py --device "$d"; done
  verify verify_matcher.py --device host-gpu --fp32-from 2
  verify verify_matcher.py --device host-gpu --model artifacts/matcher_n512_plain.tflite
}
smollm2_135m() {
  step export_llm.py --graph prefill
  step export_llm.py --graph decode
  step dump_llm_ref.py
  verify verify_llm.py --device cpu
  verify verify_llm.py
  verify verify_llm.py --device host-gpu-fp32 --prompts 3
}

ALL=(mobilenet_v2 silero_vad mtcnn realesrgan_animevideov3 all_minilm_l6_v2 smollm2_135m hifigan fcpe openwakeword
     ppocr_det xfeat)
[ "$#" -gt 0 ] || set -- "${ALL[@]}"
for name in "$@"; do
  dir=$(ls -d "$ROOT"/models/*/"$name"/converted 2>/dev/null | head -1 || true)
  [ -n "$dir" ] && declare -F "$name" >/dev/null || { echo "[rerun] no recipe named $name (have: ${ALL[*]})" >&2; exit 2; }
  cd "$dir"
  "$name"
done
echo "[rerun] done; now: $PY scripts/gen_docs.py"
