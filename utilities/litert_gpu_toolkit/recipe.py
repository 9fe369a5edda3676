"""What every recipe's verify script shares: --device, the residency line, gates, the results file.

A verify script reads top to bottom (docs/writing-a-recipe.md has the full template):

    def main() -> int:
        parser = verify_parser(__doc__, HERE)                 # --device, --results-dir, --help
        parser.add_argument("--model", ...)
        args = parser.parse_args()                            # an unknown --device exits 2 here
        info = load_model(args.model, "export_encoder.py")    # missing / corrupt artifact -> exit 2
        ref = load_reference(args.ref, "dump_encoder_ref.py")
        run = run_on_device(args.model, {sig: inputs}, args.device)
        res = residency(info, run); print(res.line)
        gates = strict_gates(args.device, res)                # the one strict-residency gate
        if not run.ok: print_failure(run)
        ... compute metrics, gates[...] = ...
        ok = report_gates(gates)
        write_results(args.results_dir, graph=..., device=args.device, run=run, residency=res.line,
                      metrics=..., gates=gates, headline=[...])
        return 0 if ok else 1

    if __name__ == "__main__":
        sys.exit(verify_main(main))

Exit status of every verify script (`verify_main`):
  0  all gates passed            1  a gate failed (the run is recorded)
  2  a user mistake: unknown device, missing / empty / corrupt artifact, an unreadable results file
  3  NO_GPU: a GPU device was asked for and no GPU driver / adapter is usable; nothing is recorded
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import errno
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from .errors import (EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED, EXIT_USAGE, ArtifactError, DeviceError,  # noqa: F401
                     NoGpuError, RecipeError, ResultsFileError)
from .model_info import InvalidModelError, ModelInfo, read_model_info
from .residency import Residency, residency, residency_line, runtime_version  # noqa: F401  (recipes import them here)
from .runtime import STATUS_NO_GPU, RunResult, compile_and_run

HOST_DEVICES = {
    "host-gpu": "this machine's GPU accelerator (strict GPU-only compile, fp16)",
    "host-gpu-fp32": "this machine's GPU accelerator with enforce_f32 (strict GPU-only compile)",
    "cpu": "LiteRT CPU (XNNPACK), fp32",
}


STRICT_GATE = "strict GPU residency N/N"
LATENCY_METRIC = "latency_ms_median"   # the one latency name: milliseconds, median over the timed runs


def _device_type(name: str) -> str:
    try:
        return resolve_device(name)
    except DeviceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """--device NAME; an unknown name is an argparse error (exit 2) before anything runs."""
    from .phone import load_registry

    parser.add_argument("--device", default="host-gpu", metavar="NAME", type=_device_type,
                        help="where to run: " + "; ".join(f"{k} = {v}" for k, v in HOST_DEVICES.items())
                             + "; or a phone over adb: " + ", ".join(load_registry())
                             + " (see utilities/litert_gpu_toolkit/phone/README.md)")


def add_results_dir_argument(parser: argparse.ArgumentParser, default: Path) -> None:
    parser.add_argument("--results-dir", type=Path, default=Path(default), metavar="DIR",
                        help="folder whose results.json records this run (default: the recipe's converted/ folder; "
                             "LITERT_RESULTS_DIR overrides both)")


def verify_parser(doc: str | None, here: Path) -> argparse.ArgumentParser:
    """The parser every verify script starts from: its docstring as --help, --device and --results-dir."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="exit status: 0 all gates passed, 1 a gate failed, 2 usage error "
                                            "(unknown device, missing or corrupt artifact), 3 no usable GPU "
                                            "(nothing recorded)")
    add_device_argument(parser)
    add_results_dir_argument(parser, here)
    return parser


def verify_main(main: Callable[[], int | None]) -> int:
    """Run a verify script's `main`, turning user mistakes into one `error:` line and exit 2 (NO_GPU: 3)."""
    try:
        return int(main() or 0)
    except RecipeError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        return exc.exit_code


def require_file(path: Path, how: str) -> Path:
    """`path` if it is a non-empty file; else an ArtifactError that says which script makes it."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path} not found: run {how} first")
    if path.stat().st_size == 0:
        raise ArtifactError(f"{path} is empty: run {how} again")
    return path


def load_model(path: Path, how: str) -> ModelInfo:
    """Read a .tflite's structure; missing, empty or corrupt -> ArtifactError naming the script that makes it."""
    require_file(path, how)
    try:
        return read_model_info(path)
    except InvalidModelError as exc:
        raise ArtifactError(f"{exc} (re-run {how})") from None


def load_reference(path: Path, how: str):
    """np.load a reference .npz; missing, empty or corrupt -> ArtifactError naming the script that makes it."""
    import zipfile

    import numpy as np

    require_file(path, how)
    try:
        data = np.load(path)
        data.files  # an .npy instead of an .npz has no .files
        return data
    except (OSError, ValueError, EOFError, AttributeError, zipfile.BadZipFile) as exc:
        raise ArtifactError(f"{path} is not a readable .npz ({type(exc).__name__}: {exc}): re-run {how}") from None


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
    Raises DeviceError for an unknown / unreachable device and NoGpuError when a host GPU device is asked
    for and no GPU is usable (a verify script then exits 3 and records nothing).
    """
    device = resolve_device(device)
    if is_phone(device):
        from .phone import run_on_phone

        def one(named: dict) -> RunResult:
            return run_on_phone(model_path, named, device, repeats=repeats, timeout=timeout)
        return _sample_by_sample(one, inputs) if _has_samples(inputs) else one(inputs)
    if device == "cpu":
        return compile_and_run(model_path, inputs, accelerator="cpu", timeout=timeout, repeats=repeats)
    run = compile_and_run(model_path, inputs, accelerator="gpu", enforce_f32=(device == "host-gpu-fp32"),
                          timeout=timeout, repeats=repeats)
    require_gpu(run, device)
    return run


def require_gpu(run: RunResult, device: str) -> None:
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
    from .runtime import Session

    device = resolve_device(device)
    if is_phone(device):
        raise DeviceError(f"{device} is a phone: its runner takes fixed inputs per job, so a loop that feeds "
                          "outputs back in runs on host devices only (host-gpu, host-gpu-fp32, cpu)")
    return Session(model_path, accelerator="cpu" if device == "cpu" else "gpu",
                   enforce_f32=device == "host-gpu-fp32")


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


def git_commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def strict_gates(device: str, *residencies: Residency) -> dict[str, bool]:
    """The one strict-residency gate: {STRICT_GATE: every graph compiled GPU-only and ran} on GPU devices,
    {} on the CPU. Pass one `Residency` per graph the recipe runs."""
    if device == "cpu":
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


def report_gates(gates: dict[str, bool]) -> bool:
    for name, passed in gates.items():
        print(f"  [{'PASS' if passed else 'FAIL'}] {name}")
    return all(gates.values())


def write_results(recipe_converted_dir: Path, *, graph: str, device: str, run: RunResult, residency: str,  # noqa: F811  (the record keeps the line)
                  metrics: dict, gates: dict[str, bool], headline: list[str] | None = None,
                  extra: dict | None = None) -> Path:
    """Merge one verify run into `<dir>/results.json` under key `<graph>@<device>`; returns the file's path.

    `headline` names the (up to three) metrics the README tables show, in order; each must be in `metrics`
    (a failed run that measured nothing may leave them out). LITERT_RESULTS_DIR overrides the folder (tests
    set it, so a test run never edits the committed records the README tables are generated from).

    Safe against the ways a results file gets lost: the merge happens under an exclusive lock on
    `results.json.lock` (two verify runs at once both land), the new file is written to a temporary file,
    fsynced and renamed over the old one (a full disk or a crash leaves the old file intact), and a
    results.json that is not valid JSON is moved aside to `results.json.corrupt-<time>` with a warning on
    stderr, never silently replaced. A run that found no GPU (status no_gpu) is refused (NoGpuError): it
    must not replace a recorded result.
    """
    if run is not None and run.status == STATUS_NO_GPU:
        require_gpu(run, device)
    headline = list(headline or [])
    missing = [k for k in headline if k not in metrics]
    if metrics and missing:
        raise ValueError(f"headline metrics {missing} are not in metrics ({sorted(metrics)})")
    target = Path(os.environ.get("LITERT_RESULTS_DIR") or recipe_converted_dir)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsFileError(f"cannot create {target}: {exc.strerror}") from None
    path = target / "results.json"
    record = {
        "graph": graph,
        "device": device,
        "device_label": device_label(device, run),
        "residency": residency,
        "metrics": metrics,
        "headline": headline,
        "gates": gates,
        "passed": all(gates.values()),
        "date": _dt.date.today().isoformat(),
        "git_commit": git_commit(Path(recipe_converted_dir)),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "python": platform.python_version(),
        **(extra or {}),
    }
    with _locked(path):
        data = _read_results(path)
        data[f"{graph}@{device}"] = record
        _atomic_write(path, json.dumps(dict(sorted(data.items())), indent=2, sort_keys=False) + "\n")
    return path


def read_results(path: Path) -> dict:
    """The records in a results.json ({} if absent). A file that is not a JSON object raises ResultsFileError."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsFileError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path} holds a {type(data).__name__}, not an object of records")
    return data


def _read_results(path: Path) -> dict:
    """read_results, but a corrupt file is moved aside (kept, named on stderr) and the merge starts empty."""
    try:
        return read_results(path)
    except ResultsFileError as exc:
        stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            aside, n = path.with_name(f"{path.name}.corrupt-{stamp}-{n}"), n + 1
        os.replace(path, aside)
        print(f"warning: {exc}; kept it as {aside.name} (its records are NOT in the new {path.name}: "
              "restore them from that file or from git)", file=sys.stderr)
        return {}


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on the sidecar `<path>.lock` (fcntl.flock; released when the block ends)."""
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ResultsFileError(f"cannot open the lock file {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _atomic_write(path: Path, text: str) -> None:
    """Write `text` to a temporary file next to `path`, fsync it, rename it over `path`. On any failure the
    old file is untouched, the temporary file removed, and a ResultsFileError names the cause."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise ResultsFileError(f"could not write {path} ({why}); the previous file is unchanged") from None
    with contextlib.suppress(OSError):   # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")
