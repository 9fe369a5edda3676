"""`--device host-native`: the phone's runner, compiled for this machine and run through the phone's job folder.

    build_host_runner()                    # g++ runner/litert_gpu_runner.cc against the wheel's libLiteRt.so
    run_native("m.tflite", {"serving_default": {"x": x}}, accelerator="gpu")   # a RunResult, like compile_and_run

Why: the code that runs on a phone (`runner/litert_gpu_runner.cc`, LiteRT's C API only) must have run somewhere
before a user with a phone runs it. The pip wheel of ai-edge-litert ships `libLiteRt.so` (the C API) and the
WebGPU accelerator beside it, so the same source builds here with the system compiler, no network and no LiteRT
source tree, and runs on this machine's GPU accelerator. `run_native` goes through `phone.run_job` -- the code
the phone path uses -- with push and pull as local copies, so the host-native path differs from the phone path
only in the transport and in the binary's target.

The build is idempotent: a stamp beside the binary records the sources, the compiler, the flags and the
library it linked against; a build that is up to date returns at once. The build folder is
`build/host-runner/` in a checkout (ignored by git), else a per-user cache; LITERT_GPU_HOST_RUNNER_DIR overrides.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..core.errors import DeviceError
from ..runtime.process_group import kill_group
from ..runtime.compiled import RunResult

SOURCE_DIR = Path(__file__).resolve().with_name("runner")
SOURCES = ("litert_gpu_runner.cc", "litert_c_api.h")
BINARY = "litert_gpu_runner"
FLAGS = ("-std=c++17", "-O2", "-Wall", "-Wextra")
# the fuzz test's build: AddressSanitizer + UndefinedBehaviorSanitizer turn a silent memory error into an abort
SANITIZE_FLAGS = ("-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-fsanitize=address,undefined",
                  "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer")
SANITIZER_ENV = {"ASAN_OPTIONS": "abort_on_error=1:detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1:abort_on_error=1"}
BUILD_DIR_ENV = "LITERT_GPU_HOST_RUNNER_DIR"


class NativeRunnerError(DeviceError, RuntimeError):
    """The native runner cannot be built or started here (no compiler, no libLiteRt.so): exit 2 in verify scripts."""


def runtime_lib_dir(runtime: str | None = None) -> Path:
    """The folder of the ai_edge_litert package, which holds libLiteRt.so and the GPU accelerator: the installed
    one, or that of ai-edge-litert `runtime` in its side environment (made on first use, runtime/versions.py)."""
    if runtime is not None:
        from ..runtime.versions import side_runtime

        env = side_runtime(runtime).python.parent.parent
        found = sorted(env.glob("lib*/python*/site-packages/ai_edge_litert/libLiteRt.so"))
        if not found:
            raise NativeRunnerError(f"ai-edge-litert {runtime}'s side environment holds no libLiteRt.so")
        return found[0].parent
    spec = importlib.util.find_spec("ai_edge_litert")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in map(Path, locations):
        if (folder / "libLiteRt.so").is_file():
            return folder
    raise NativeRunnerError("ai_edge_litert's libLiteRt.so was not found (pip install ai-edge-litert; "
                            "scripts/setup.sh installs the pinned version)")


def default_build_dir() -> Path:
    if os.environ.get(BUILD_DIR_ENV):
        return Path(os.environ[BUILD_DIR_ENV])
    repo = Path(__file__).resolve().parents[3]
    if (repo / "pyproject.toml").is_file() and (repo / "utilities" / "litert_gpu_toolkit").is_dir():
        return repo / "build" / "host-runner"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "litert_gpu_toolkit" / "host-runner"


def find_compiler() -> str:
    """$CXX, else g++, c++ or clang++ on PATH."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise NativeRunnerError("no C++ compiler found for the native runner (set CXX, or install g++: "
                            "apt-get install -y g++; scripts/setup.sh does)")


def _stamp(compiler: str, lib_dir: Path, flags: tuple[str, ...]) -> str:
    """What the binary depends on: a different stamp means rebuild."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise NativeRunnerError(f"{compiler} --version failed: {exc}") from None
    lib = lib_dir / "libLiteRt.so"
    st = lib.stat()
    return json.dumps({"sources": digest.hexdigest(), "compiler": compiler,
                       "compiler_version": version.splitlines()[0] if version else "", "flags": list(flags),
                       "lib": str(lib), "lib_size": st.st_size, "lib_mtime_ns": st.st_mtime_ns}, sort_keys=True)


def build_host_runner(build_dir: Path | None = None, *, force: bool = False, verbose: bool = False,
                      sanitize: bool = False, runtime: str | None = None) -> Path:
    """Compile the runner for this machine (if not up to date) and return the binary's path. `sanitize`: the
    ASan + UBSan build the fuzz test runs (a separate binary; run it with SANITIZER_ENV). `runtime`: link it
    against that ai-edge-litert version's libLiteRt.so instead of the installed one (its own folder under the
    build folder): what a C / C++ app on that version runs. The C API of 2.2.0 and later fits the runner; 2.1.x's
    builds but refuses to load a model (measured: `scripts/native_on_runtime.py`)."""
    build_dir = Path(build_dir or default_build_dir())
    if runtime is not None:
        build_dir = build_dir / f"runtime-{runtime}"
    lib_dir = runtime_lib_dir(runtime)
    compiler = find_compiler()
    build_dir.mkdir(parents=True, exist_ok=True)
    flags = SANITIZE_FLAGS if sanitize else FLAGS
    name = f"{BINARY}-sanitized" if sanitize else BINARY
    binary, stamp_file = build_dir / name, build_dir / f"{name}.stamp"
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)    # two test processes building at once must not interleave
        stamp = _stamp(compiler, lib_dir, flags)
        if not force and binary.is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp:
            if verbose:
                print(f"native runner up to date: {binary}")
            return binary
        tmp = build_dir / f".{name}.{os.getpid()}.tmp"
        cmd = [compiler, *flags, "-o", str(tmp), str(SOURCE_DIR / "litert_gpu_runner.cc"),
               f"-L{lib_dir}", "-lLiteRt", f"-Wl,-rpath,{lib_dir}", "-ldl"]
        if verbose:
            print("building the native runner: " + " ".join(cmd))
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NativeRunnerError(f"building the native runner failed to start: {exc}") from None
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise NativeRunnerError(f"building the native runner failed ({' '.join(cmd)}):\n"
                                    + (proc.stderr or proc.stdout)[-4000:])
        os.replace(tmp, binary)
        stamp_file.write_text(stamp)
        if verbose:
            print(f"built {binary} in {time.perf_counter() - start:.1f} s")
        return binary


class LocalTransport:
    """The phone's job trip on this machine: "push" copies the job into a device folder, the runner runs there,
    "pull" copies its out/ folder back."""

    def __init__(self, runner: Path, cache_dir: Path | None = None):
        self.runner = Path(runner)
        self.cache_dir = Path(cache_dir).resolve() if cache_dir is not None else None

    def run(self, job: Path, out_local: Path, timeout: float) -> tuple[int | None, str, bool]:
        device = job.parent / "device"
        remote = device / job.name
        shutil.copytree(job, remote)                       # push
        log_path = device / "runner.log"
        with open(log_path, "wb") as log:
            cache = ["--cache-dir", str(self.cache_dir)] if self.cache_dir is not None else []
            proc = subprocess.Popen([str(self.runner), "--manifest", str(remote / "manifest.json"),
                                     "--out", str(remote / "out"), *cache], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                returncode, timed_out = proc.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                returncode, timed_out = proc.wait(), True
            except BaseException:   # Ctrl-C: the runner must not outlive the call
                kill_group(proc.pid)
                proc.wait()
                raise
        if (remote / "out").is_dir():
            shutil.copytree(remote / "out", out_local)     # pull
        return returncode, log_path.read_text(errors="replace"), timed_out


def run_native(model_path, inputs: dict, *, accelerator: str = "gpu", enforce_f32: bool = False, repeats: int = 1,
               timeout: float = 1800.0, runner: Path | None = None, cache_dir: Path | None = None,
               runtime: str | None = None) -> RunResult:
    """Run `inputs` ({signature: {name: array} or a list of samples}) through the native runner on this machine:
    strict GPU-only compile (accelerator "gpu") or LiteRT's CPU path ("cpu"), one compile for everything.
    `cache_dir` (an existing folder) turns on the GPU program cache there: the first compile writes the model's
    compiled programs, later ones read them (`RunResult.cache` says which; docs/performance.md). `runtime`: the
    runner built against that ai-edge-litert version (`build_host_runner`); the result names it."""
    from . import run_job

    if cache_dir is not None and not Path(cache_dir).is_dir():
        raise NativeRunnerError(f"the GPU program cache folder {cache_dir} does not exist")
    runner = Path(runner) if runner else build_host_runner(runtime=runtime)
    run = run_job(LocalTransport(runner, cache_dir), model_path, inputs, accelerator=accelerator,
                  enforce_f32=enforce_f32, repeats=repeats, timeout=timeout)
    run.runtime = runtime
    return run


def main(argv: list[str] | None = None) -> int:
    """`python -m litert_gpu_toolkit.phone.native [--force] [--build-dir DIR]`: build (or confirm) the runner."""
    import argparse

    parser = argparse.ArgumentParser(description="build the native runner for --device host-native")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--build-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        path = build_host_runner(args.build_dir, force=args.force, verbose=True)
    except NativeRunnerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
