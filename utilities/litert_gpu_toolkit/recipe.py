"""What every recipe's verify script shares: --device, the residency line, gates, the results file.

A verify script reads top to bottom:

    parser = argparse.ArgumentParser(...); add_device_argument(parser); args = parser.parse_args()
    run = run_on_device(model_path, {"serving_default": inputs}, args.device)
    print(residency_line(read_model_info(model_path), run))
    ... compute metrics ...
    ok = report_gates({"min cosine >= 0.999": min_cos >= 0.999, ...})
    write_results(Path(__file__).parent, graph="encoder", device=args.device, run=run, metrics={...}, gates=...)
    sys.exit(0 if ok else 1)
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .model_info import ModelInfo
from .runtime import RunResult, compile_and_run

HOST_DEVICES = {
    "host-gpu": "this machine's GPU accelerator (strict GPU-only compile, fp16)",
    "host-gpu-fp32": "this machine's GPU accelerator with enforce_f32 (strict GPU-only compile)",
    "cpu": "LiteRT CPU (XNNPACK), fp32",
}


class DeviceError(ValueError):
    pass


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    from .phone import load_registry

    parser.add_argument("--device", default="host-gpu", metavar="NAME",
                        help="where to run: " + "; ".join(f"{k} = {v}" for k, v in HOST_DEVICES.items())
                             + "; or a phone over adb: " + ", ".join(load_registry())
                             + " (see utilities/litert_gpu_toolkit/phone/README.md)")


def known_devices() -> list[str]:
    from .phone import load_registry

    return [*HOST_DEVICES, *load_registry()]


def resolve_device(name: str) -> str:
    """Return `name` if it is a host device or a phone in the registry; else a clear error listing them."""
    if name in known_devices():
        return name
    raise DeviceError(f"unknown device {name!r}; known: {', '.join(known_devices())} "
                      "(phones are listed in utilities/litert_gpu_toolkit/phone/devices.json)")


def is_phone(device: str) -> bool:
    return device not in HOST_DEVICES


def run_on_device(model_path, inputs: dict, device: str = "host-gpu", *, timeout: float = 1800.0,
                  repeats: int = 1) -> RunResult:
    """Run `inputs` ({signature: {name: array}}) through the model on `device`. Never falls back silently.

    host-gpu / host-gpu-fp32: this machine's GPU accelerator, strict GPU-only compile.
    cpu: LiteRT's CPU path. A phone name: adb + the on-device runner (strict GPU), see `phone`.
    """
    device = resolve_device(device)
    if is_phone(device):
        from .phone import run_on_phone

        def one(named: dict) -> RunResult:
            return run_on_phone(model_path, named, device, repeats=repeats, timeout=timeout)
        return _sample_by_sample(one, inputs) if _has_samples(inputs) else one(inputs)
    if device == "cpu":
        return compile_and_run(model_path, inputs, accelerator="cpu", timeout=timeout, repeats=repeats)
    return compile_and_run(model_path, inputs, accelerator="gpu", enforce_f32=(device == "host-gpu-fp32"),
                           timeout=timeout, repeats=repeats)


def _has_samples(inputs: dict) -> bool:
    return any(isinstance(v, (list, tuple)) for v in inputs.values())


def _sample_by_sample(run_one, inputs: dict) -> RunResult:
    """A list of samples (see runtime.compile_and_run) on a runner that takes one input set per job:
    one job per sample, outputs stacked on a new leading axis, run_s the median. Stops at a failure."""
    import numpy as np

    result, logs, times, rows = None, [], {}, {}
    for sig, given in inputs.items():
        for named in (given if isinstance(given, (list, tuple)) else [given]):
            result = run_one({sig: named})
            logs.append(result.log)
            if not result.ok:
                result.log = "\n".join(logs)
                return result
            times.setdefault(sig, []).append(result.run_s.get(sig, 0.0))
            for name, arr in result.outputs[sig].items():
                rows.setdefault(sig, {}).setdefault(name, []).append(arr)
    result.outputs = {sig: {n: (np.stack(v) if isinstance(inputs[sig], (list, tuple)) else v[-1])
                            for n, v in named.items()} for sig, named in rows.items()}
    result.run_s = {sig: float(np.median(t)) for sig, t in times.items()}
    result.log = "\n".join(logs)
    return result


@dataclass
class Residency:
    """Where a compiled model's ops run: the numbers behind the residency line (recipes and the checker)."""
    gpu_ops: int | None
    total_ops: int
    cpu_ops: int | None
    partitions: int | None      # GPU partitions, where known (strict compile, or the delegate's 'Replacing' line)
    strict: bool                # compiled GPU-only, without CPU fallback, and ran
    line: str

    def to_dict(self) -> dict:
        return asdict(self)


def residency(info: ModelInfo, run: RunResult) -> Residency:
    """Residency of `run` (a compile of the model `info` describes); `.line` is what recipes record."""
    total = info.num_ops
    if run.accelerator == "cpu":
        return Residency(0, total, total, None, False, f"CPU: {total} ops (no GPU involved)")
    from .phone import residency_from_log

    delegated = residency_from_log(run.log)
    if delegated is not None:
        gpu_nodes, nodes, partitions = delegated
        strict = run.ok and gpu_nodes == nodes
        tail = " (strict GPU)" if strict else ""
        return Residency(gpu_nodes, nodes, nodes - gpu_nodes, partitions, strict,
                         f"GPU residency: {gpu_nodes}/{nodes} ops, {partitions} partition"
                         f"{'s' if partitions != 1 else ''}{tail}")
    if run.ok and run.accelerator == "gpu":
        graphs = max(1, len({op.subgraph for op in info.ops}))
        where = "1 partition" if graphs == 1 else f"1 partition in each of {graphs} graphs"
        return Residency(total, total, 0, graphs, True, f"GPU residency: {total}/{total} ops, {where} (strict GPU)")
    if run.gpu.cpu_ops is not None:
        # the delegate prints one split per graph with rejections; graphs it does not mention run fully on GPU
        on_gpu = total - run.gpu.cpu_ops
        return Residency(on_gpu, total, run.gpu.cpu_ops, None, False,
                         f"{on_gpu}/{total} ops on GPU, {run.gpu.cpu_ops} on CPU")
    why = (run.error or "").splitlines()[0] if run.error else ""
    return Residency(None, total, None, None, False, f"GPU residency: unknown ({run.status}: {why})")


def residency_line(info: ModelInfo, run: RunResult) -> str:
    """The line recipes record: `GPU residency: 121/121 ops, 1 partition (strict GPU)` or the split."""
    return residency(info, run).line


def device_label(device: str, run: RunResult) -> str:
    """A label that says where the numbers came from, e.g. 'llvmpipe (software Vulkan), ai-edge-litert 2.3.0'."""
    version = runtime_version()
    if device == "cpu":
        return f"CPU ({platform.machine()}, XNNPACK), ai-edge-litert {version}"
    if is_phone(device):
        return f"{run.gpu.adapter} (phone, via adb), LiteRT runner"
    adapter = run.gpu.adapter or "unknown GPU"
    kind = "software Vulkan" if run.gpu.is_software else (run.gpu.backend or "GPU")
    precision = "fp32" if run.enforce_f32 else "fp16"
    return f"{adapter.split(' (')[0]} ({kind}, {precision}), ai-edge-litert {version}"


def runtime_version() -> str:
    try:
        from importlib.metadata import version
        return version("ai-edge-litert")
    except Exception:
        return "unknown"


def git_commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def report_gates(gates: dict[str, bool]) -> bool:
    for name, passed in gates.items():
        print(f"  [{'PASS' if passed else 'FAIL'}] {name}")
    return all(gates.values())


def write_results(recipe_converted_dir: Path, *, graph: str, device: str, run: RunResult, residency: str,
                  metrics: dict, gates: dict[str, bool], extra: dict | None = None) -> Path:
    """Merge one verify run into `<converted>/results.json` under key `<graph>@<device>`.

    Set LITERT_RESULTS_DIR to write somewhere else (tests do, so a test run never edits the
    committed records that the README tables are generated from).
    """
    target = os.environ.get("LITERT_RESULTS_DIR") or recipe_converted_dir
    Path(target).mkdir(parents=True, exist_ok=True)
    path = Path(target) / "results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    key = f"{graph}@{device}"
    data[key] = {
        "graph": graph,
        "device": device,
        "device_label": device_label(device, run),
        "residency": residency,
        "metrics": metrics,
        "gates": gates,
        "passed": all(gates.values()),
        "date": _dt.date.today().isoformat(),
        "git_commit": git_commit(Path(recipe_converted_dir)),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "python": platform.python_version(),
        **(extra or {}),
    }
    path.write_text(json.dumps(dict(sorted(data.items())), indent=2, sort_keys=False) + "\n")
    return path


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")
