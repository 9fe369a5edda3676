"""Run a .tflite on an Android phone's GPU over adb, and bring the numbers back for comparison.

    run = run_on_phone("model.tflite", {"serving_default": {"x": x}}, "pixel8")

Steps: push the job (model + raw inputs + manifest, see `protocol.py`) to the phone, run the
on-device runner (`runner/litert_gpu_runner.cc`, LiteRT's C API, cross-compiled with the NDK by
scripts/build_phone_runner.sh; strict GPU, no CPU fallback), pull the outputs, parse the runtime's
log for residency, return a `RunResult` exactly like the host runtime does -- so verify scripts
compare phone and host the same way. `run_job` is the part the phone shares with
`--device host-native` (native.py), where the same binary runs on this machine and push / pull
are local copies.

Every adb call is an argument list; nothing is passed through a host shell. Remote paths are
made by this module (no spaces, no user text).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..runtime.compiled import STATUS_OK, STATUS_RUN_ERROR, STATUS_TIMEOUT, RunResult, parse_gpu_log
from ..core.errors import DeviceError
from .protocol import write_job

REGISTRY_PATH = Path(__file__).with_name("devices.json")
REMOTE_ROOT = "/data/local/tmp/litert_gpu"
RUNNER_DIR = f"{REMOTE_ROOT}/runner"
CACHE_DIR = f"{REMOTE_ROOT}/gpu_cache"      # the GPU program cache on the phone (run_on_phone(program_cache=True))
RUNNER_NAME = "litert_gpu_runner"


class PhoneError(DeviceError, RuntimeError):
    """The phone cannot be used (adb missing, no phone, no runner): a kind of recipe.DeviceError (exit 2)."""


class AdbTimeout(PhoneError):
    """An adb call did not finish in time."""


@dataclass(frozen=True)
class Phone:
    name: str
    description: str
    soc: str
    gpu: str
    gpu_family: str
    accelerator_lib: str
    serial: str | None
    notes: str = ""
    abi: str = "arm64-v8a"


def load_registry(path: Path = REGISTRY_PATH) -> dict[str, Phone]:
    raw = json.loads(Path(path).read_text())
    phones = {}
    for name, entry in raw.items():
        if name.startswith("_"):
            continue
        phones[name] = Phone(name=name, **{k: entry.get(k) for k in
                                           ("description", "soc", "gpu", "gpu_family", "accelerator_lib", "serial")},
                             notes=entry.get("notes", ""), abi=entry.get("abi", "arm64-v8a"))
    return phones


def find_adb() -> str:
    adb = shutil.which("adb")
    if adb is None:
        raise PhoneError("adb not found on PATH: install Android platform-tools and connect the phone with USB "
                         "debugging enabled (see utilities/litert_gpu_toolkit/phone/README.md)")
    return adb


class Adb:
    """A thin adb wrapper: every call is an argument list."""

    def __init__(self, serial: str | None = None, adb: str | None = None, timeout: float = 600.0):
        self.adb = adb or find_adb()
        self.serial = serial or os.environ.get("ANDROID_SERIAL") or None
        self.timeout = timeout

    def _cmd(self, *args: str) -> list[str]:
        return [self.adb, *(["-s", self.serial] if self.serial else []), *args]

    def call(self, *args: str, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired as exc:
            raise AdbTimeout(f"adb {' '.join(args[:2])} timed out after {exc.timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            raise PhoneError(f"adb {' '.join(args)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
        return proc

    def state(self) -> str:
        return self.call("get-state", check=False).stdout.strip()

    def shell(self, *args: str, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
        return self.call("shell", *args, check=check, timeout=timeout)

    def push(self, local: Path, remote: str) -> None:
        self.call("push", str(local), remote)

    def pull(self, remote: str, local: Path) -> None:
        self.call("pull", remote, str(local))


def push_runner(build_dir: Path, phone: Phone, adb: Adb | None = None) -> list[str]:
    """Copy the built runner and the LiteRT libraries next to it onto the phone."""
    adb = adb or Adb(phone.serial)
    build_dir = Path(build_dir)
    files = [build_dir / RUNNER_NAME, build_dir / "libLiteRt.so", build_dir / phone.accelerator_lib]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise PhoneError("missing in the build folder: " + ", ".join(missing) +
                         " (see utilities/litert_gpu_toolkit/phone/README.md, 'Build the runner')")
    adb.shell("mkdir", "-p", RUNNER_DIR)
    for f in files:
        adb.push(f, f"{RUNNER_DIR}/{f.name}")
    adb.shell("chmod", "755", f"{RUNNER_DIR}/{RUNNER_NAME}")
    return [f.name for f in files]


def residency_from_log(log: str) -> tuple[int, int, int] | None:
    """(gpu_nodes, total_nodes, partitions) from the delegate's 'Replacing N out of M node(s)' line."""
    return parse_gpu_log(log).delegated


def run_on_phone(model_path, inputs: dict, device: str, *, enforce_f32: bool = False,
                 repeats: int = 1, adb: Adb | None = None, timeout: float = 1800.0,
                 program_cache: bool = False) -> RunResult:
    """Run `inputs` ({signature: {name: array} or a list of such samples}) on the phone's GPU (strict), one
    compile for all of them. Returns a RunResult like the host runtime. program_cache: keep the GPU's compiled
    programs in CACHE_DIR on the phone (keyed by the model's bytes and precision; `RunResult.cache` says whether
    this compile read them)."""
    phones = load_registry()
    if device not in phones:
        raise PhoneError(f"unknown phone {device!r}; known: {', '.join(phones)}")
    phone = phones[device]
    adb = adb or Adb(phone.serial, timeout=timeout)
    state = adb.state()
    if state != "device":
        raise PhoneError(f"no phone ready over adb (state: {state or 'none'}); connect {phone.description} "
                         "with USB debugging, or set ANDROID_SERIAL")
    probe = adb.shell("ls", f"{RUNNER_DIR}/{RUNNER_NAME}", check=False)
    if probe.returncode != 0:
        raise PhoneError(f"the runner is not on the phone ({RUNNER_DIR}/{RUNNER_NAME}); build and push it: "
                         "python -m litert_gpu_toolkit phone push-runner BUILD_DIR --device " + device)
    result = run_job(AdbTransport(adb, CACHE_DIR if program_cache else None), model_path, inputs,
                     accelerator="gpu", enforce_f32=enforce_f32, repeats=repeats, timeout=timeout)
    result.gpu.adapter = result.gpu.adapter or f"{phone.gpu} ({phone.description})"
    result.gpu.backend = result.gpu.backend or "OpenCL/OpenGL (phone)"
    return result


class AdbTransport:
    """A job's trip to a phone: push the job folder, run the runner there, pull its out/ folder back."""

    def __init__(self, adb: Adb, cache_dir: str | None = None):
        self.adb, self.cache_dir = adb, cache_dir

    def run(self, job: Path, out_local: Path, timeout: float) -> tuple[int | None, str, bool]:
        remote = f"{REMOTE_ROOT}/{job.name}"   # made by run_job: "job_" + hex digits, no user text
        self.adb.shell("mkdir", "-p", remote, *([self.cache_dir] if self.cache_dir else []))
        cache = ["--cache-dir", self.cache_dir] if self.cache_dir else []
        try:
            for f in sorted(job.iterdir()):     # file names made by write_job from indices
                self.adb.push(f, f"{remote}/{f.name}")
            try:
                proc = self.adb.shell("env", f"LD_LIBRARY_PATH={RUNNER_DIR}", f"{RUNNER_DIR}/{RUNNER_NAME}",
                                      "--manifest", f"{remote}/manifest.json", "--out", f"{remote}/out", *cache,
                                      check=False, timeout=timeout)
            except AdbTimeout as exc:
                return None, str(exc), True
            log = proc.stdout + proc.stderr
            pulled = out_local.with_name(out_local.name + "_pulled")
            pull = self.adb.call("pull", f"{remote}/out", str(pulled), check=False)
            # `adb pull DIR LOCAL` creates LOCAL (new) or LOCAL/out (existing): accept both
            src = pulled / "out" if (pulled / "out" / "result.json").exists() else pulled
            if pull.returncode == 0 and src.is_dir():
                src.rename(out_local)
            return proc.returncode, log, False
        finally:
            self.adb.shell("rm", "-rf", remote, check=False)


def run_job(transport, model_path, inputs: dict, *, accelerator: str = "gpu", enforce_f32: bool = False,
            repeats: int = 1, timeout: float = 1800.0) -> RunResult:
    """Write one job for all of `inputs` (every signature, every sample), let `transport` run it on its device,
    read the pulled outputs back into a RunResult. The phone and `--device host-native` share this."""
    from .jobs import entries_of, fill_result, matched_to_model

    entries, sampled = entries_of(inputs)
    entries = matched_to_model(model_path, entries)
    result = RunResult(status=STATUS_OK, accelerator=accelerator, enforce_f32=enforce_f32)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="litert-job-") as tmp:
        try:
            job = write_job(Path(tmp) / f"job_{uuid.uuid4().hex[:12]}", Path(model_path), entries,
                            accelerator=accelerator, enforce_f32=enforce_f32, repeats=repeats)
        except ValueError as exc:   # e.g. a dtype the protocol does not carry: a failed run, not a crash
            result.status, result.error = STATUS_RUN_ERROR, f"the runner protocol cannot carry this job: {exc}"
            return result
        out_local = Path(tmp) / "out"
        returncode, log, timed_out = transport.run(job, out_local, timeout)
        if timed_out:
            result.status, result.log = STATUS_TIMEOUT, log
            result.error = f"the runner did not finish within {timeout:.0f} s (killed)"
            result.gpu = parse_gpu_log(log)
        else:
            fill_result(result, out_local, returncode, log, sampled)
    result.wall_s = time.perf_counter() - start
    return result
