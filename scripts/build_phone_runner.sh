#!/usr/bin/env bash
# Cross-compile the phone runner for Android arm64 with the NDK: the same source that --device host-native builds
# for this machine (utilities/litert_gpu_toolkit/phone/runner/litert_gpu_runner.cc, LiteRT's C API only), linked
# against the Android release's libLiteRt.so. The output folder is what `phone push-runner` takes.
#
#   scripts/build_phone_runner.sh --litert-lib DIR [--out DIR] [--api LEVEL] [--accelerator FILE]
#
#   --litert-lib DIR    holds the LiteRT release's Android arm64 libLiteRt.so and GPU accelerator (same version as
#                       ai-edge-litert in requirements.txt; where to get them: utilities/litert_gpu_toolkit/phone/README.md)
#   --out DIR           output folder (default: build/phone-runner); gets the runner and copies of both libraries
#   --api LEVEL         Android API level to target (default: 31)
#   --accelerator FILE  the GPU accelerator's file name in --litert-lib (default: libLiteRtClGlAccelerator.so)
#   environment: ANDROID_NDK_HOME (or ANDROID_NDK_ROOT) = the Android NDK, r27 or newer
#
# Exit status: 0 built; 1 the compiler failed; 2 a usage error or a missing / wrong input (nothing is built).
# Needs no network. Checks every input first, so a machine without the NDK gets one clear line, not a compiler error.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SOURCE="$ROOT/utilities/litert_gpu_toolkit/phone/runner/litert_gpu_runner.cc"
LIB_DIR="" OUT="$ROOT/build/phone-runner" API=31 ACCEL="libLiteRtClGlAccelerator.so"

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { printf 'build_phone_runner: error: %s\n' "$*" >&2; exit 2; }
say() { printf '[build_phone_runner] %s\n' "$*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --litert-lib|--out|--api|--accelerator)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (see --help)"
      case "$1" in
        --litert-lib) LIB_DIR="$2" ;; --out) OUT="$2" ;; --api) API="$2" ;; --accelerator) ACCEL="$2" ;;
      esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

[ -n "$LIB_DIR" ] || { usage >&2; die "--litert-lib DIR is required: the Android arm64 libLiteRt.so and GPU accelerator"; }
case "$API" in ''|*[!0-9]*) die "--api must be a number (an Android API level), got '$API'" ;; esac
[ "$API" -ge 26 ] || die "--api $API is too old: the LiteRT GPU accelerator needs Android 8.0 (API 26) or newer"
case "$ACCEL" in */*|'') die "--accelerator is a file name inside --litert-lib, not a path: '$ACCEL'" ;; esac

# The NDK and its clang++ (one prebuilt host folder per NDK: linux-x86_64, darwin-x86_64, ...)
NDK="${ANDROID_NDK_HOME:-${ANDROID_NDK_ROOT:-}}"
[ -n "$NDK" ] || die "ANDROID_NDK_HOME is not set: install the Android NDK (r27 or newer) and export ANDROID_NDK_HOME=<its folder>"
[ -d "$NDK" ] || die "ANDROID_NDK_HOME=$NDK is not a folder"
CXX=""
for candidate in "$NDK"/toolchains/llvm/prebuilt/*/bin/clang++; do
  [ -x "$candidate" ] && { CXX="$candidate"; break; }
done
[ -n "$CXX" ] || die "no clang++ under $NDK/toolchains/llvm/prebuilt/*/bin: is ANDROID_NDK_HOME an NDK (r27 or newer)?"

# An ELF shared object for AArch64: 0x7f 'E' 'L' 'F', 64-bit, little-endian, e_machine 183 (bytes 18-19).
elf_machine() {
  local b
  b=($(od -An -tu1 -N20 -v "$1" 2>/dev/null || true))
  [ "${#b[@]}" -eq 20 ] || { echo "not-elf"; return; }
  [ "${b[0]} ${b[1]} ${b[2]} ${b[3]}" = "127 69 76 70" ] || { echo "not-elf"; return; }
  case "${b[18]} ${b[19]}" in
    "183 0") echo "aarch64" ;; "62 0") echo "x86-64" ;; "40 0") echo "arm32" ;; "3 0") echo "x86" ;;
    *) echo "machine ${b[18]}+256*${b[19]}" ;;
  esac
}
need_arm64() {
  [ -f "$1" ] || die "$1 is missing: put the LiteRT release's Android arm64 $(basename "$1") there (see phone/README.md)"
  local m
  m="$(elf_machine "$1")"
  [ "$m" = "aarch64" ] || die "$1 is not an arm64 ELF library ($m): the phone needs the Android arm64 build, not the pip wheel's"
}
[ -d "$LIB_DIR" ] || die "--litert-lib $LIB_DIR is not a folder"
need_arm64 "$LIB_DIR/libLiteRt.so"
need_arm64 "$LIB_DIR/$ACCEL"
[ -f "$SOURCE" ] || die "the runner's source is missing: $SOURCE"

mkdir -p "$OUT"
say "compiling $(basename "$SOURCE") for aarch64-linux-android$API with $CXX"
# -static-libstdc++: the phone has no libc++_shared.so beside the runner; $ORIGIN: libLiteRt.so sits beside it.
if ! "$CXX" --target="aarch64-linux-android$API" -std=c++17 -O2 -Wall -Wextra -fPIE -pie -static-libstdc++ \
    -o "$OUT/litert_gpu_runner" "$SOURCE" -L"$LIB_DIR" -lLiteRt -ldl '-Wl,-rpath,$ORIGIN'; then
  printf 'build_phone_runner: error: the compiler failed (output above)\n' >&2
  exit 1
fi
[ "$(elf_machine "$OUT/litert_gpu_runner")" = "aarch64" ] || {
  printf 'build_phone_runner: error: %s is not an arm64 executable\n' "$OUT/litert_gpu_runner" >&2; exit 1; }
cp "$LIB_DIR/libLiteRt.so" "$LIB_DIR/$ACCEL" "$OUT/"
say "built $OUT/litert_gpu_runner (with libLiteRt.so and $ACCEL beside it)"
say "next: python -m litert_gpu_toolkit phone push-runner $OUT --device pixel8"
