"""Compile and run a .tflite through LiteRT's CompiledModel API in a child process.

Why a child process: the GPU delegate reports *why* it rejects ops only on native stderr (fd 2),
never in the Python exception, and the native runtime can crash or hang on a bad graph. Each
`compile_and_run` call therefore starts `python -m litert_gpu_toolkit.runtime.worker`, captures its
stderr, enforces a timeout, and turns every outcome -- success, rejected ops, missing GPU
adapter, crash, hang -- into a `RunResult` instead of an exception.

One call = one compile with one accelerator set and precision, then one run per signature.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .process_group import kill_group

# accelerator sets accepted by `compile_and_run`
ACCELERATORS = ("cpu", "gpu", "gpu+cpu")

STATUS_OK = "ok"
STATUS_NO_GPU = "no_gpu"               # no adapter / driver / GPU backend
STATUS_OPS_REJECTED = "ops_rejected"   # the delegate declined ops (strict GPU compile)
STATUS_COMPILE_ERROR = "compile_error" # compile raised for another reason
STATUS_RUN_ERROR = "run_error"         # compiled, but running a signature raised
STATUS_CRASH = "crash"                 # the child died on a signal / exited abnormally
STATUS_TIMEOUT = "timeout"             # the child hung past the timeout
STATUS_KILLED = "killed"               # the child was killed from outside (SIGKILL: out of memory?, SIGTERM)

# signals that come from outside the runtime (the OOM killer, a user, a scheduler): not the model's fault
OUTSIDE_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_NO_GPU_PATTERNS = (
    "No adapters found",
    "Failed to initialize WebGPU environment",
    "Couldn't load Vulkan",
    "GPU accelerator could not be loaded",
    "Failed to create WebGPU",
    "Found no drivers",
)
_REJECT_HEADER = "Following operations are not supported by GPU delegate"
_SPLIT_RE = re.compile(r"(\d+) operations will run on the GPU, and the remaining (\d+) operations? will run on the CPU")
_NONE_RE = re.compile(r"No operations will run on the GPU, and all (\d+) operations? will run on the CPU")
_ADAPTER_RE = re.compile(r"Selected adapter: (.+?)(?:, arch=[^\n]*?)?, backend=(\w+)(?:[^\n]*?adapterType=([^\n]+))?")
_REPLACING_RE = re.compile(r"Replacing (\d+) out of (\d+) node\(s\) with delegate.*?(\d+) partitions?")
_REJECT_LINE_RE = re.compile(r"^([A-Z][A-Z0-9_]+):\s*(.*)$")  # the reason may be empty ("DEQUANTIZE: ")


@dataclass
class RejectedOp:
    op: str
    reason: str


@dataclass
class GpuLog:
    """What the native log says about the GPU (parsed from the child's stderr)."""
    adapter: str | None = None          # e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"
    backend: str | None = None          # e.g. "Vulkan"
    adapter_type: str | None = None     # e.g. "CPU / Software"
    no_gpu_reason: str | None = None    # the log line that says there is no GPU
    rejected: list[RejectedOp] = field(default_factory=list)
    gpu_ops: int | None = None          # from "N operations will run on the GPU, ...", summed over subgraphs
    cpu_ops: int | None = None
    splits: list[tuple[int, int]] = field(default_factory=list)  # (gpu, cpu) per reported subgraph
    delegated: tuple[int, int, int] | None = None  # (gpu nodes, total nodes, partitions): 'Replacing N out of M'

    @property
    def is_software(self) -> bool:
        text = f"{self.adapter} {self.adapter_type}".lower()
        return "llvmpipe" in text or "software" in text or "swiftshader" in text


def parse_gpu_log(log: str) -> GpuLog:
    info = GpuLog()
    m = _ADAPTER_RE.search(log)
    if m:
        info.adapter, info.backend = m.group(1).strip(), m.group(2)
        info.adapter_type = m.group(3).strip() if m.group(3) else None
    for line in log.splitlines():
        if any(p in line for p in _NO_GPU_PATTERNS) and info.no_gpu_reason is None:
            info.no_gpu_reason = line.strip()
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if _REJECT_HEADER in line:
            for follow in lines[i + 1:]:
                follow = follow.strip()
                rm = _REJECT_LINE_RE.match(follow)
                if not rm:
                    break
                entry = RejectedOp(rm.group(1), rm.group(2).strip() or "(no reason given)")
                if entry not in info.rejected:
                    info.rejected.append(entry)
    # one split line per subgraph that had rejections (a multi-signature model prints several)
    for line in lines:
        m = _SPLIT_RE.search(line)
        if m:
            info.splits.append((int(m.group(1)), int(m.group(2))))
        else:
            m = _NONE_RE.search(line)
            if m:
                info.splits.append((0, int(m.group(1))))
    m = _REPLACING_RE.search(log)
    if m:
        info.delegated = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if info.splits:
        info.gpu_ops = sum(g for g, _ in info.splits)
        info.cpu_ops = sum(c for _, c in info.splits)
    return info


@dataclass
class RunResult:
    """Outcome of one compile (+ runs) in a child process."""
    status: str
    accelerator: str
    enforce_f32: bool
    outputs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # signature -> name -> array
    error: str | None = None           # exception text or crash description
    log: str = ""                      # the child's native stderr
    gpu: GpuLog = field(default_factory=GpuLog)
    returncode: int | None = None
    compile_s: float | None = None
    run_s: dict[str, float] = field(default_factory=dict)  # signature -> seconds (one run)
    wall_s: float = 0.0
    fully_accelerated: bool | None = None
    stage: str | None = None           # last stage the child reached: "compile", "run:<signature>", "done"
    runtime: str | None = None         # the ai-edge-litert version of a side environment (None: the installed one)
    times: dict[str, list[float]] = field(default_factory=dict)   # signature -> seconds of every run, first first
    cache: dict | None = None          # the native runner's GPU program cache: {"key", "files_before", "files_after"}
    first_run_s: float | None = None   # the first run after the compile (what an app's first call pays)

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.strip().splitlines()[-lines:])


def _classify(returncode: int, payload: dict | None, log: str, accelerator: str) -> str:
    gpu = parse_gpu_log(log)
    if payload is None:
        return STATUS_CRASH
    if payload.get("status") == "ok":
        return STATUS_OK
    stage = payload.get("stage")
    if stage == "compile":
        if "gpu" in accelerator and gpu.no_gpu_reason and not gpu.rejected:
            return STATUS_NO_GPU
        if gpu.rejected or gpu.gpu_ops is not None:
            return STATUS_OPS_REJECTED
        return STATUS_COMPILE_ERROR
    return STATUS_RUN_ERROR


def compile_and_run(
    model: str | os.PathLike | bytes,
    inputs: dict[str, dict[str, np.ndarray]] | None = None,
    *,
    accelerator: str = "gpu",
    enforce_f32: bool = False,
    timeout: float = 300.0,
    repeats: int = 1,
    env: dict[str, str] | None = None,
    runtime: str | None = None,
) -> RunResult:
    """Compile `model` for `accelerator` ("cpu", "gpu" = strict GPU-only, "gpu+cpu" = fallback allowed)
    and run each signature in `inputs` ({signature: {input name: array}}). With `inputs=None` it only
    compiles. `repeats` > 1 times the run (median seconds in `run_s`). Never raises for runtime
    failures: inspect `RunResult.status`.

    A signature's value may also be a list of input dicts (samples): all are run on the one compile,
    each output comes back stacked on a new leading axis (one row per sample), and `run_s` is the
    median over the samples -- this is how a verify script runs N real inputs without N compiles.

    runtime: another ai-edge-litert version to run under (`runtime.versions`: a side environment made on first
    use; RuntimeVersionError when it cannot be); None: the LITERT_GPU_RUNTIME environment variable's version when
    set (every check, verify and zoo run of a process then uses it), else the installed one.
    """
    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator must be one of {ACCELERATORS}, got {accelerator!r}")
    python = sys.executable
    from .versions import chosen, prepare, side_runtime

    runtime = prepare(chosen(runtime))            # None: this environment's own runtime
    if runtime is not None:
        python = str(side_runtime(runtime).python)
    with tempfile.TemporaryDirectory(prefix="litert-gpu-") as tmp:
        work = Path(tmp)
        if isinstance(model, (bytes, bytearray)):
            model_path = work / "model.tflite"
            model_path.write_bytes(bytes(model))
        else:
            model_path = Path(model).resolve()
        request = {"model": str(model_path), "accelerator": accelerator, "enforce_f32": enforce_f32,
                   "signatures": [], "repeats": max(1, int(repeats))}
        arrays = {}
        sampled = {sig for sig, named in (inputs or {}).items() if isinstance(named, (list, tuple))}
        entries = [(sig, named) for sig, given in (inputs or {}).items()
                   for named in (given if sig in sampled else [given])]
        for s_i, (sig, named) in enumerate(entries):
            entry = {"key": sig, "inputs": []}
            for n_i, (name, arr) in enumerate(named.items()):
                slot = f"s{s_i}_i{n_i}"
                arrays[slot] = np.ascontiguousarray(arr)
                entry["inputs"].append({"name": name, "slot": slot})
            request["signatures"].append(entry)
        np.savez(work / "inputs.npz", **arrays)
        (work / "request.json").write_text(json.dumps(request))

        child_env = dict(os.environ if env is None else env)
        pkg_root = str(Path(__file__).resolve().parents[2])  # utilities/, above the package
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, child_env.get("PYTHONPATH")) if p)
        stderr_path = work / "stderr.txt"
        start = time.perf_counter()
        returncode, timed_out = _run_worker(work, stderr_path, child_env, timeout, python)
        wall = time.perf_counter() - start
        log = stderr_path.read_text(errors="replace")
        payload = None
        result_path = work / "result.json"
        if result_path.exists():
            try:
                payload = json.loads(result_path.read_text())
            except json.JSONDecodeError:
                payload = None
        stage_path = work / "stage"
        stage = stage_path.read_text().strip() if stage_path.exists() else None
        if timed_out:
            status = STATUS_TIMEOUT
        elif returncode < 0 and -returncode in OUTSIDE_SIGNALS:
            status = STATUS_KILLED
            payload = None
        elif returncode != 0 and (payload is None or payload.get("status") == "ok"):
            status = STATUS_CRASH
            payload = None
        else:
            status = _classify(returncode, payload, log, accelerator)
        result = RunResult(status=status, accelerator=accelerator, enforce_f32=enforce_f32, log=log,
                           gpu=parse_gpu_log(log), returncode=returncode, wall_s=wall, stage=stage, runtime=runtime)
        during = f" during {stage.replace(':', ' of signature ', 1)}" if stage else ""
        if status == STATUS_TIMEOUT:
            result.error = f"the runtime did not finish within {timeout:.0f} s (killed{during})"
        elif status == STATUS_KILLED:
            name = signal.Signals(-returncode).name
            result.error = (f"the runtime process was killed from outside (signal {-returncode} {name}{during}; "
                            f"{'out of memory? ' if name == 'SIGKILL' else ''}not a model fault)")
        elif status == STATUS_CRASH:
            how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0
                   else f"exited with status {returncode}")
            result.error = f"the runtime process {how}{during} without a result"
        if payload:
            result.error = result.error or payload.get("error")
            result.compile_s = payload.get("compile_s")
            result.run_s = payload.get("run_s", {})
            result.times = payload.get("times", {})
            result.first_run_s = payload.get("first_run_s")
            result.fully_accelerated = payload.get("fully_accelerated")
            if payload.get("status") == "ok" and (work / "outputs.npz").exists():
                rows: dict[str, dict[str, list]] = {}
                with np.load(work / "outputs.npz") as data:
                    for o in payload.get("outputs", []):
                        rows.setdefault(o["signature"], {}).setdefault(o["name"], []).append(data[o["slot"]])
                for sig, named in rows.items():
                    result.outputs[sig] = {n: (np.stack(v) if sig in sampled else v[-1]) for n, v in named.items()}
                for sig in sampled & set(result.run_s):
                    times = [t for k, t in payload.get("entry_s", []) if k == sig]
                    result.run_s[sig] = float(np.median(times)) if times else result.run_s[sig]
        return result


def _run_worker(work: Path, stderr_path: Path, env: dict[str, str], timeout: float,
                python: str = sys.executable) -> tuple[int, bool]:
    """Start the worker for `work` and wait for it: (returncode, timed out).

    The worker runs in its own session (a native crash or hang cannot take this process with it) and
    is tied to this process by a pipe whose write end only we hold: when we die for any reason the
    worker sees end-of-file, kills itself and removes `work` (see `_worker.supervise`). When we are
    interrupted (Ctrl-C) or time out, its whole process group is killed here before returning.
    """
    watch_r, watch_w = os.pipe()
    try:
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen([python, "-m", "litert_gpu_toolkit.runtime.worker", str(work),
                                     str(watch_r)],
                                    stdout=err, stderr=err, env=env, start_new_session=True, pass_fds=(watch_r,))
        os.close(watch_r)
        watch_r = -1
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            return proc.wait(), True
        except BaseException:  # KeyboardInterrupt, SystemExit: the worker must not outlive the call
            kill_group(proc.pid)
            proc.wait()
            raise
    finally:
        for fd in (watch_r, watch_w):
            if fd >= 0:
                os.close(fd)


def probe_gpu(timeout: float = 120.0, env: dict[str, str] | None = None) -> RunResult:
    """Strict-GPU compile and run of a one-op model: tells whether this machine has a usable GPU."""
    from .tiny_models import PROBE_SHAPE, add_model_bytes

    x = np.arange(np.prod(PROBE_SHAPE), dtype=np.float32).reshape(PROBE_SHAPE) / 64.0
    result = compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}},
                             accelerator="gpu", timeout=timeout, env=env)
    if result.ok:
        got = result.outputs["serving_default"]["out"]
        if not np.allclose(got, 2 * x, rtol=1e-2, atol=1e-2):
            result.status, result.error = STATUS_RUN_ERROR, "the GPU probe computed a wrong sum"
    return result


@contextlib.contextmanager
def native_stderr_captured(tail_chars: int = 3000):
    """Run LiteRT in *this* process with its native stderr (INFO lines) kept off the console.

    For loops that must stay in-process (a streaming step carrying state, an autoregressive
    decode): the runtime's fd-2 chatter goes to a temporary file, whose tail is printed if the
    block raises. Prefer `compile_and_run` (a child process) wherever a run can be one call.
    """
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            log.seek(0)
            print(log.read().decode(errors="replace")[-tail_chars:], file=sys.stderr)
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class Session:
    """One model compiled once in *this* process, for stateful loops: an autoregressive decode, a streaming step.

        with Session("decode.tflite", accelerator="gpu") as s:      # strict GPU-only compile, no fallback
            out = s.run({"tokens": t, **cache})                     # {output name: array}
            cache = {k: v for k, v in out.items() if k != "logits"}
        s.seconds                                                    # per run: write inputs + run + read outputs

    Use it only where outputs must feed the next call and one `compile_and_run` cannot express the loop; a
    native crash here takes the caller down with it (that is why `compile_and_run` uses a child process).
    Inside the `with` block the runtime's native stderr goes to a temporary file whose tail is printed if
    the block raises (`native_stderr_captured`). `run` writes only the inputs it is given; the others keep
    the value last written (write a constant input once). Accelerator "gpu" compiles GPU-only: an op the
    GPU rejects makes the compile raise, nothing falls back to the CPU; "cpu" is LiteRT's CPU path.
    """

    def __init__(self, model: str | os.PathLike, *, accelerator: str = "gpu", enforce_f32: bool = False,
                 signature: int = 0):
        if accelerator not in ("cpu", "gpu"):
            raise ValueError(f"Session accelerator must be 'cpu' or 'gpu', got {accelerator!r}")
        self.model_path = Path(model)
        self.accelerator, self.enforce_f32, self.signature = accelerator, enforce_f32, signature
        self.seconds: list[float] = []
        self._stack: contextlib.ExitStack | None = None
        self._model = None

    def __enter__(self) -> "Session":
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(native_stderr_captured())
        try:
            self._compile()
        except BaseException:
            if not self._stack.__exit__(*sys.exc_info()):
                raise
        return self

    def __exit__(self, *exc) -> bool:
        # release the model while its native chatter is still captured, then restore stderr
        self._model = self._ins = self._outs = None
        stack, self._stack = self._stack, None
        return bool(stack and stack.__exit__(*exc))

    def _compile(self) -> None:
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.gpu_options import GpuOptions
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import Options

        accel = HardwareAccelerator.CPU if self.accelerator == "cpu" else HardwareAccelerator.GPU
        options = Options(hardware_accelerators=accel, gpu_options=GpuOptions(enforce_f32=self.enforce_f32))
        model = CompiledModel.from_file(str(self.model_path), options=options)
        key = list(model.get_signature_list())[self.signature]
        self.input_names: list[str] = list(model.get_input_tensor_details(key))
        self._out_details = model.get_output_tensor_details(key)
        self.output_names: list[str] = list(self._out_details)
        self._ins = model.create_input_buffers(self.signature)
        self._outs = model.create_output_buffers(self.signature)
        self._model = model

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Write `inputs` (by name), run once, read every output. Appends the seconds taken to `seconds`."""
        if self._model is None:
            raise RuntimeError("Session.run outside its `with` block")
        unknown = set(inputs) - set(self.input_names)
        if unknown:
            raise KeyError(f"{self.model_path.name} has no inputs {sorted(unknown)}; it takes {self.input_names}")
        t0 = time.perf_counter()
        for name, value in inputs.items():
            self._ins[self.input_names.index(name)].write(np.ascontiguousarray(value))
        self._model.run_by_index(self.signature, self._ins, self._outs)
        got = {name: self._outs[i].read(int(np.prod(d["shape"])), np.dtype(d["dtype"])).reshape(d["shape"])
               for i, (name, d) in enumerate(self._out_details.items())}
        self.seconds.append(time.perf_counter() - t0)
        return got
