"""Where a verify script runs a model: host GPU (fp16 / fp32), CPU, the native runner on this machine, or a phone;
the strict-residency gate."""
from __future__ import annotations

import argparse
import os
import platform
from typing import Iterable

from ..core.errors import (EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED, EXIT_USAGE, ArtifactError, DeviceError,  # noqa: F401
                     NoGpuError, RecipeError, ResultsFileError)
from ..runtime.residency import Residency, gpu_label, residency, residency_line, runtime_version  # noqa: F401  (recipes import them here)
from ..runtime.compiled import STATUS_NO_GPU, RunResult, compile_and_run


HOST_DEVICES = {
    "host-gpu": "this machine's GPU accelerator (strict GPU-only compile, fp16)",
    "host-gpu-fp32": "this machine's GPU accelerator with enforce_f32 (strict GPU-only compile)",
    "cpu": "LiteRT CPU (XNNPACK), fp32",
    "host-native": "the phone's native runner (LiteRT C API) built for this machine, on its GPU accelerator "
                   "(strict GPU-only, fp16), through the phone's job folder",
    "host-native-fp32": "the native runner on this machine's GPU accelerator with enforce_f32",
    "host-native-cpu": "the native runner on LiteRT's CPU path",
}

# device -> (accelerator, enforce_f32) of the native runner (phone/native.py)
NATIVE_DEVICES = {"host-native": ("gpu", False), "host-native-fp32": ("gpu", True), "host-native-cpu": ("cpu", False)}


STRICT_GATE = "strict GPU residency N/N"


LATENCY_METRIC = "latency_ms_median"   # the one latency name: milliseconds, median over the timed runs


class Device(str):
    """A `--device` value, parsed once (`resolve_device`, argparse's type): the name -- it is a str, so it prints,
    compares and is recorded as before -- and what it means, as properties instead of predicates on strings."""

    @property
    def phone(self) -> bool:
        """A phone over adb (any registry name that is not a host device)."""
        return str(self) not in HOST_DEVICES

    @property
    def native(self) -> bool:
        """The native runner on this machine (host-native*)."""
        return str(self) in NATIVE_DEVICES

    @property
    def fixed_inputs_only(self) -> bool:
        """Runs as a job with fixed inputs (a phone, the native runner): a loop that feeds outputs back in cannot."""
        return self.phone or self.native

    @property
    def cpu(self) -> bool:
        """LiteRT's CPU path (no GPU, no residency gate)."""
        return str(self) == "cpu" or NATIVE_DEVICES.get(str(self), ("gpu",))[0] == "cpu"

    @property
    def fp32(self) -> bool:
        """A GPU run with enforce_f32 (host-gpu-fp32, host-native-fp32)."""
        return str(self) in ("host-gpu-fp32", "host-native-fp32")


def _device_type(name: str) -> Device:
    try:
        return resolve_device(name)
    except DeviceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """--device NAME, parsed into a `Device`; an unknown name is an argparse error (exit 2) before anything runs."""
    from ..phone import load_registry

    parser.add_argument("--device", default=Device("host-gpu"), metavar="NAME", type=_device_type,
                        help="where to run: " + "; ".join(f"{k} = {v}" for k, v in HOST_DEVICES.items())
                             + "; or a phone over adb: " + ", ".join(load_registry())
                             + " (see utilities/litert_gpu_toolkit/phone/README.md)")


def known_devices() -> list[str]:
    from ..phone import load_registry

    return [*HOST_DEVICES, *load_registry()]


def resolve_device(name: str) -> Device:
    """`name` as a `Device` if it is a host device or a phone in the registry; else a clear error listing them.
    A `Device` is returned as it is (it was checked when it was made)."""
    if isinstance(name, Device):
        return name
    if name in known_devices():
        return Device(name)
    raise DeviceError(f"unknown device {name!r}; known: {', '.join(known_devices())} "
                      "(phones are listed in utilities/litert_gpu_toolkit/phone/devices.json)")


# The predicates on a device name, for callers that hold a plain string (a Device answers them itself).
def is_phone(device: str) -> bool:
    return Device(device).phone


def is_native(device: str) -> bool:
    """The native runner on this machine (--device host-native*)."""
    return Device(device).native


def fixed_inputs_only(device: str) -> bool:
    """True where a model runs as a job with fixed inputs (a phone, the native runner)."""
    return Device(device).fixed_inputs_only


def uses_cpu(device: str) -> bool:
    """The device runs LiteRT's CPU path (no GPU, no residency gate)."""
    return Device(device).cpu


def run_on_device(model_path, inputs: dict, device: str = "host-gpu", *, timeout: float = 1800.0,
                  repeats: int = 1) -> RunResult:
    """Run `inputs` ({signature: {name: array}}) through the model on `device`. Never falls back silently.

    host-gpu / host-gpu-fp32: this machine's GPU accelerator, strict GPU-only compile.
    cpu: LiteRT's CPU path. host-native*: the phone's runner built for this machine (phone/native.py), on its
    GPU (strict) or CPU, through the phone's job folder. A phone name: adb + the on-device runner (strict GPU),
    see `phone`. Raises DeviceError for an unknown / unreachable device and NoGpuError when a GPU device on
    this machine is asked for and no GPU is usable (a verify script then exits 3 and records nothing).
    """
    device = resolve_device(device)
    if device.phone:
        from ..phone import run_on_phone

        return run_on_phone(model_path, inputs, device, repeats=repeats, timeout=timeout)
    if device.native:
        from ..phone.native import run_native

        accelerator, enforce_f32 = NATIVE_DEVICES[device]
        run = run_native(model_path, inputs, accelerator=accelerator, enforce_f32=enforce_f32, repeats=repeats,
                         timeout=timeout)
        refuse_no_gpu(run, device)
        return run
    if device == "cpu":
        return compile_and_run(model_path, inputs, accelerator="cpu", timeout=timeout, repeats=repeats)
    run = compile_and_run(model_path, inputs, accelerator="gpu", enforce_f32=device.fp32,
                          timeout=timeout, repeats=repeats)
    refuse_no_gpu(run, device)
    return run


def refuse_no_gpu(run: RunResult, device: str) -> None:
    """Raise NoGpuError (exit 3) if `run` found no usable GPU; the message names the missing driver."""
    if run.status != STATUS_NO_GPU:
        return
    icd = os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES")
    hint = (f"VK_ICD_FILENAMES={icd} names no usable Vulkan driver" if icd else
            "no Vulkan driver / adapter found (install Mesa's software Vulkan: scripts/install_software_gpu.py)")
    raise NoGpuError(f"no usable GPU for --device {device}: {hint}; the runtime said: "
                     f"{run.gpu.no_gpu_reason or run.error or run.status}. Nothing was recorded.")


def open_session(model_path, device: str):
    """A `runtime.Session` (in-process, compiled once) for `device`'s stateful loop; strict like run_on_device.
    Host devices only: a phone runner takes one fixed input set per job (DeviceError)."""
    from ..runtime.compiled import Session

    device = resolve_device(device)
    if device.fixed_inputs_only:
        what = "the native runner" if device.native else "a phone"
        raise DeviceError(f"{device} is {what}: its runner takes fixed inputs per job, so a loop that feeds "
                          "outputs back in runs in-process only (host-gpu, host-gpu-fp32, cpu)")
    return Session(model_path, accelerator="cpu" if device.cpu else "gpu", enforce_f32=device.fp32)


def device_label(device: str, run: RunResult) -> str:
    """A label that says where the numbers came from, e.g. 'llvmpipe (software Vulkan), ai-edge-litert 2.3.0'."""
    device, version = resolve_device(device), runtime_version()
    # the native runner links the wheel's libLiteRt.so: the same runtime version, named as a different program
    via = ", native runner (LiteRT C API)" if device.native else ""
    if device.cpu:
        return f"CPU ({platform.machine()}, XNNPACK){via}, ai-edge-litert {version}"
    if device.phone:
        return f"{run.gpu.adapter} (phone, via adb), LiteRT runner"
    label = gpu_label(run.gpu.adapter, run.gpu.is_software, run.gpu.backend, "fp32" if run.enforce_f32 else "fp16",
                      version)
    return label.replace(f", ai-edge-litert {version}", f"{via}, ai-edge-litert {version}", 1)


def strict_gates(device: str, *residencies: Residency) -> dict[str, bool]:
    """The one strict-residency gate: {STRICT_GATE: every graph compiled GPU-only and ran} on GPU devices,
    {} on the CPU. Pass one `Residency` per graph the recipe runs."""
    if resolve_device(device).cpu:
        return {}
    return {STRICT_GATE: bool(residencies) and all(r.strict for r in residencies)}


def print_failure(run: RunResult, what: str = "run", log_lines: int = 20) -> None:
    """Say why a run failed: status, error, each op the GPU rejected, and the native log tail on a crash."""
    print(f"{what} failed: {run.status}: {run.error or '(no error text)'}")
    for r in run.gpu.rejected:
        print(f"  rejected by the GPU: {r.op}: {r.reason}")
    if not run.gpu.rejected and run.log.strip():
        print("  last lines of the runtime's log:")
        for line in run.log_tail(log_lines).splitlines():
            print(f"    {line}")


def latency_ms(seconds: Iterable[float] | float) -> float:
    """Median of `seconds` (or one value) in milliseconds, to 4 significant digits: the value of LATENCY_METRIC."""
    import numpy as np

    values = [seconds] if isinstance(seconds, (int, float)) else list(seconds)
    return float(f"{1e3 * float(np.median(values)):.4g}") if values else float("nan")


STARTUP_METRICS = ("init_ms", "first_run_ms")   # what an app pays before the steady LATENCY_METRIC


def startup_metrics(*runs: RunResult | None) -> dict[str, float]:
    """A cold start, in milliseconds: `init_ms` (the compile: on the GPU, its programs are built here) and
    `first_run_ms` (the first run after it), summed over `runs` -- a recipe that runs several graphs passes each,
    since an app compiles and first-runs them all. A figure some run lacks is left out, never guessed; 4
    significant digits, as `latency_ms`."""
    runs = [r for r in runs if r is not None]
    out = {}
    for name, attr in zip(STARTUP_METRICS, ("compile_s", "first_run_s")):
        values = [getattr(r, attr) for r in runs]
        if values and all(v is not None for v in values):
            out[name] = float(f"{1e3 * sum(values):.4g}")
    return out
