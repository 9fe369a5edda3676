"""Run a .tflite on an Android phone's GPU over adb, and bring the numbers back for comparison.

    run = run_on_phone("model.tflite", {"serving_default": {"x": x}}, "pixel8")

Steps: push the job (model + raw inputs + manifest, see `protocol.py`) to the phone, run the
on-device runner (`runner/`, built with the NDK against LiteRT's prebuilt C++ SDK; strict GPU,
no CPU fallback), pull the outputs, parse the runtime's log for residency, return a `RunResult`
exactly like the host runtime does -- so verify scripts compare phone and host the same way.

Every adb call is an argument list; nothing is passed through a host shell. Remote paths are
made by this module (no spaces, no user text).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..runtime import STATUS_COMPILE_ERROR, STATUS_OK, STATUS_OPS_REJECTED, STATUS_RUN_ERROR, STATUS_TIMEOUT, \
    RunResult, parse_gpu_log
from ..errors import DeviceError
from .protocol import read_outputs, write_job

REGISTRY_PATH = Path(__file__).with_name("devices.json")
REMOTE_ROOT = "/data/local/tmp/litert_gpu"
RUNNER_DIR = f"{REMOTE_ROOT}/runner"
RUNNER_NAME = "litert_gpu_runner"


class PhoneError(DeviceError, RuntimeError):
    """The phone cannot be used (adb missing, no phone, no runner): a kind of recipe.DeviceError (exit 2)."""


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
            raise PhoneError(f"adb {' '.join(args[:2])} timed out after {exc.timeout:.0f} s") from exc
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


def run_on_phone(model_path, inputs: dict[str, dict[str, np.ndarray]], device: str, *, enforce_f32: bool = False,
                 repeats: int = 1, adb: Adb | None = None, timeout: float = 1800.0) -> RunResult:
    """Run each signature's inputs on the phone's GPU (strict). Returns a RunResult like the host runtime."""
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
    result = RunResult(status=STATUS_OK, accelerator="gpu", enforce_f32=enforce_f32)
    logs = []
    with tempfile.TemporaryDirectory(prefix="litert-phone-") as tmp:
        for key, named in inputs.items():
            job_id = f"job_{uuid.uuid4().hex[:12]}"
            local = write_job(Path(tmp) / job_id, Path(model_path), key, named, enforce_f32=enforce_f32,
                              repeats=repeats)
            remote = f"{REMOTE_ROOT}/{job_id}"
            adb.shell("mkdir", "-p", remote)
            for f in sorted(local.iterdir()):
                adb.push(f, f"{remote}/{f.name}")
            try:
                proc = adb.shell("env", f"LD_LIBRARY_PATH={RUNNER_DIR}", f"{RUNNER_DIR}/{RUNNER_NAME}",
                                 "--manifest", f"{remote}/manifest.json", "--out", f"{remote}/out",
                                 check=False, timeout=timeout)
            except PhoneError as exc:
                result.status, result.error = STATUS_TIMEOUT, str(exc)
                break
            logs.append(proc.stdout + proc.stderr)
            out_local = Path(tmp) / f"{job_id}_out"
            adb.pull(f"{remote}/out", out_local)
            adb.shell("rm", "-rf", remote, check=False)
            # `adb pull DIR LOCAL` creates LOCAL (new) or LOCAL/out (existing): accept both
            out_dir = out_local / "out" if (out_local / "out" / "result.json").exists() else out_local
            try:
                status, arrays = read_outputs(out_dir)
            except (OSError, ValueError, KeyError) as exc:   # a runner that breaks the protocol: its fault, said
                result.status, result.error = STATUS_RUN_ERROR, f"the runner's result is not readable: {exc}"
                break
            if status["status"] != "ok":
                result.error = status.get("error")
                if status["status"] == "compile_failed":
                    gpu = parse_gpu_log("\n".join(logs))
                    result.status = STATUS_OPS_REJECTED if gpu.rejected or gpu.gpu_ops is not None \
                        else STATUS_COMPILE_ERROR
                else:
                    result.status = STATUS_RUN_ERROR
                break
            result.outputs[key] = arrays
            result.compile_s = (status.get("compile_ms") or 0.0) / 1e3
            run_ms = sorted(status.get("run_ms") or [0.0])
            result.run_s[key] = run_ms[len(run_ms) // 2] / 1e3
    result.log = "\n".join(logs)
    result.gpu = parse_gpu_log(result.log)
    result.gpu.adapter = result.gpu.adapter or f"{phone.gpu} ({phone.description})"
    result.gpu.backend = result.gpu.backend or "OpenCL/OpenGL (phone)"
    return result
