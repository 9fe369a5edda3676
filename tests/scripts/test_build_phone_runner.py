"""scripts/build_phone_runner.sh: argument and input checks, and -- against a TEST DOUBLE of the NDK's clang++ --
the command it would run and the folder it leaves for `phone push-runner`.

No NDK is installed on the machines this project is built on, so the Android build itself is not run here (see
utilities/litert_gpu_toolkit/phone/README.md, "What has been run where"). The double proves the script's
plumbing: which file it compiles, for which target, against which library, and what lands in the output folder.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from litert_gpu_toolkit.phone import load_registry, push_runner

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_phone_runner.sh"
SOURCE = ROOT / "utilities" / "litert_gpu_toolkit" / "phone" / "runner" / "litert_gpu_runner.cc"
FAKES = ROOT / "tests" / "toolkit" / "phone" / "fakes"

def elf(machine: int) -> bytes:
    """A 64-bit little-endian ELF header whose e_machine (bytes 18-19) is `machine`: 183 = AArch64, 62 = x86-64."""
    return b"\x7fELF\x02\x01\x01" + b"\0" * 9 + (3).to_bytes(2, "little") + machine.to_bytes(2, "little") + b"\0" * 44


FAKE_CLANG = """#!/bin/sh
# TEST DOUBLE of the NDK's clang++: records its arguments, writes an arm64 ELF header where -o points.
printf '%s\\n' "$@" > "$FAKE_CLANG_LOG"
out=""
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
[ -n "$FAIL" ] && { echo "fake clang++: error: on purpose" >&2; exit 1; }
printf '\\177ELF\\002\\001\\001\\000\\000\\000\\000\\000\\000\\000\\000\\000\\003\\000\\267\\000' > "$out"
"""


@pytest.fixture()
def ndk(tmp_path):
    clang = tmp_path / "ndk" / "toolchains" / "llvm" / "prebuilt" / "linux-x86_64" / "bin" / "clang++"
    clang.parent.mkdir(parents=True)
    clang.write_text(FAKE_CLANG)
    clang.chmod(0o755)
    return tmp_path / "ndk"


@pytest.fixture()
def libs(tmp_path):
    folder = tmp_path / "android_arm64"
    folder.mkdir()
    (folder / "libLiteRt.so").write_bytes(elf(183))
    (folder / "libLiteRtClGlAccelerator.so").write_bytes(elf(183))
    return folder


def run(*args: str, ndk: Path | None = None, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ANDROID_NDK_HOME", "ANDROID_NDK_ROOT")}
    if ndk is not None:
        env["ANDROID_NDK_HOME"] = str(ndk)
    env.update(extra_env or {})
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=60)


def test_help_and_usage_errors(tmp_path, libs):
    assert run("--help").returncode == 0 and "--litert-lib DIR" in run("--help").stdout
    for args, message in ([(), "--litert-lib DIR is required"], [("--bogus",), "unknown argument: --bogus"],
                          [("--litert-lib",), "--litert-lib needs a value"],
                          [("--litert-lib", libs, "--api", "x31"), "--api must be a number"],
                          [("--litert-lib", libs, "--api", "21"), "too old"],
                          [("--litert-lib", libs, "--accelerator", "../x.so"), "a file name inside"]):
        proc = run(*args)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


def test_without_the_ndk_it_fails_clearly(tmp_path, libs):
    proc = run("--litert-lib", libs)
    assert proc.returncode == 2 and "ANDROID_NDK_HOME is not set" in proc.stderr
    proc = run("--litert-lib", libs, ndk=tmp_path / "missing")
    assert proc.returncode == 2 and "is not a folder" in proc.stderr
    (tmp_path / "empty_ndk").mkdir()
    proc = run("--litert-lib", libs, ndk=tmp_path / "empty_ndk")
    assert proc.returncode == 2 and "no clang++" in proc.stderr


def test_wrong_libraries_are_refused_before_compiling(tmp_path, ndk, libs):
    log = tmp_path / "clang.log"
    (libs / "libLiteRt.so").write_bytes(elf(62))        # the pip wheel's x86-64 library
    proc = run("--litert-lib", libs, "--out", tmp_path / "out", ndk=ndk, extra_env={"FAKE_CLANG_LOG": str(log)})
    assert proc.returncode == 2 and "not an arm64 ELF library (x86-64)" in proc.stderr
    (libs / "libLiteRt.so").write_bytes(elf(183))
    (libs / "libLiteRtClGlAccelerator.so").unlink()
    proc = run("--litert-lib", libs, "--out", tmp_path / "out", ndk=ndk, extra_env={"FAKE_CLANG_LOG": str(log)})
    assert proc.returncode == 2 and "libLiteRtClGlAccelerator.so is missing" in proc.stderr
    (libs / "libLiteRtClGlAccelerator.so").write_bytes(b"not an ELF file")
    proc = run("--litert-lib", libs, "--out", tmp_path / "out", ndk=ndk, extra_env={"FAKE_CLANG_LOG": str(log)})
    assert proc.returncode == 2 and "(not-elf)" in proc.stderr
    assert not log.exists(), "the compiler ran although an input was wrong"


def test_builds_with_the_ndk_double_and_push_runner_takes_the_output(tmp_path, ndk, libs, monkeypatch):
    log, out = tmp_path / "clang.log", tmp_path / "out"
    proc = run("--litert-lib", libs, "--out", out, "--api", "33", ndk=ndk, extra_env={"FAKE_CLANG_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    argv = log.read_text().splitlines()
    assert "--target=aarch64-linux-android33" in argv and str(SOURCE) in argv
    assert f"-L{libs}" in argv and "-lLiteRt" in argv and "-Wl,-rpath,$ORIGIN" in argv and "-static-libstdc++" in argv
    assert argv[argv.index("-o") + 1] == str(out / "litert_gpu_runner")
    assert sorted(p.name for p in out.iterdir()) == ["libLiteRt.so", "libLiteRtClGlAccelerator.so",
                                                      "litert_gpu_runner"]
    assert f"phone push-runner {out} --device" in proc.stdout
    # what `phone push-runner OUT --device pixel8` does with that folder (over the adb test double)
    root = tmp_path / "phone_fs"
    root.mkdir()
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    pushed = push_runner(out, load_registry()["pixel8"])
    assert sorted(pushed) == ["libLiteRt.so", "libLiteRtClGlAccelerator.so", "litert_gpu_runner"]
    assert (root / "data" / "local" / "tmp" / "litert_gpu" / "runner" / "litert_gpu_runner").read_bytes()[:4] == \
        b"\x7fELF"


def test_a_compiler_failure_is_exit_1(tmp_path, ndk, libs):
    proc = run("--litert-lib", libs, "--out", tmp_path / "out", ndk=ndk,
               extra_env={"FAKE_CLANG_LOG": str(tmp_path / "clang.log"), "FAIL": "1"})
    assert proc.returncode == 1 and "the compiler failed" in proc.stderr
