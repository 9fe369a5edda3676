"""Child-process side of `runtime.compile_and_run` (internal; run as
`python -m litert_gpu_toolkit.runtime.worker DIR [PARENT_FD]`).

Reads DIR/request.json and DIR/inputs.npz, compiles once, runs each requested signature, writes
DIR/outputs.npz and DIR/result.json. Anything the native runtime prints goes to stderr, which the
parent captures. A crash here leaves no result.json, which the parent reports as a crash.

Lifetime: the child must never outlive the process that asked for it. With PARENT_FD (the read end
of a pipe whose write end only the parent holds) this process becomes a small supervisor: it forks
the real worker (which asks the kernel for SIGKILL when the supervisor dies, PR_SET_PDEATHSIG on
Linux) and waits for either the worker to finish (its exit status is passed on unchanged, a
signal death included) or the pipe to reach end-of-file, which happens the moment the parent
dies for any reason, SIGKILL included. Then it kills the worker and removes DIR.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent exits (Linux only). True if set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _wait_for_child_or_parent(pid: int, parent_fd: int) -> int | None:
    """Block until the worker `pid` exits (return its wait status) or the parent's pipe closes (None)."""
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    try:
        while True:
            watch = [parent_fd] + ([pidfd] if pidfd is not None else [])
            ready, _, _ = select.select(watch, [], [], None if pidfd is not None else 0.2)
            if parent_fd in ready and not os.read(parent_fd, 1):
                return None  # end-of-file: the parent is gone
            done, status = os.waitpid(pid, 0 if pidfd is not None and pidfd in ready else os.WNOHANG)
            if done:
                return status
    finally:
        if pidfd is not None:
            os.close(pidfd)


def supervise(work: Path, parent_fd: int) -> int:
    """Run `main(work)` in a forked worker that dies with us; we die (and clean up) with the parent."""
    me = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 1
        try:
            os.close(parent_fd)
            die_with_parent()
            if os.getppid() != me:  # the supervisor died before prctl took effect
                os._exit(1)
            code = main(work)
        except BaseException:  # noqa: BLE001 - a child must never unwind into the supervisor's code
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    status = _wait_for_child_or_parent(pid, parent_fd)
    if status is None:  # the parent died: nobody will read the results, and nothing may be left behind
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        shutil.rmtree(work, ignore_errors=True)
        return 1
    if os.WIFSIGNALED(status):  # pass a signal death on as our own, so the parent sees the same -N
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught and need no reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


def _write(work: Path, payload: dict) -> None:
    tmp = work / "result.json.tmp"
    tmp.write_text(json.dumps(payload))
    tmp.replace(work / "result.json")


# Test double (tests only): LITERT_GPU_TOOLKIT_TEST_FAULT=crash|hang|oom[@cpu|@gpu|@gpu+cpu] makes this child abort
# (SIGABRT), hang, or SIGKILL itself the way the kernel's out-of-memory killer would, after compiling and before
# the first run, so tests can prove the parent survives each and reports it truthfully.
# "@gpu" matches both GPU accelerator sets; no suffix matches every child. Never set it outside tests.
TEST_FAULT_ENV = "LITERT_GPU_TOOLKIT_TEST_FAULT"


def _test_fault(accelerator: str) -> None:
    spec = os.environ.get(TEST_FAULT_ENV, "").strip()
    if not spec:
        return
    fault, _, where = spec.partition("@")
    if where and not (where == accelerator or (where == "gpu" and "gpu" in accelerator)):
        return
    print(f"{TEST_FAULT_ENV}={spec}: injecting a {fault} on purpose (test double)", file=sys.stderr, flush=True)
    if fault == "crash":
        os.abort()
    if fault == "oom":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        while True:
            time.sleep(60)


def _stage(work: Path, stage: str) -> None:
    (work / "stage").write_text(stage)  # read by the parent when the child crashes or hangs


def _resize_inputs(model, index: int, key: str, in_details: dict, sig: dict, arrays) -> bool:
    """Resize inputs whose array shape differs from the model's current shape (dynamic dims). True if any."""
    shapes = {entry["name"]: list(arrays[entry["slot"]].shape) for entry in sig["inputs"]}
    changed = False
    for pos, name in enumerate(in_details):
        want = shapes.get(name)
        if want is not None and want != list(in_details[name]["shape"]):
            try:
                model.resize_input_tensor(pos, want, index)
            except Exception as exc:
                raise ValueError(f"signature {key!r}, input {name!r}: model shape {in_details[name]['shape']}, "
                                 f"array shape {want}, and the runtime would not resize it ({exc})") from exc
            changed = True
    return changed


class OptionUnavailable(RuntimeError):
    """The installed ai-edge-litert's Python API cannot express a requested option (an older runtime)."""


def _compile(compiled_model, request: dict, flags):
    """CompiledModel.from_file with the request's accelerators and precision, in whichever Python API this
    ai-edge-litert has: `Options` / `GpuOptions` (2.2 on), or the `hardware_accel` argument alone before it (no
    enforce_f32 there: asking for it is an error, not a silent fp16 run)."""
    try:
        from ai_edge_litert.gpu_options import GpuOptions
        from ai_edge_litert.options import Options
    except ImportError:
        if request["enforce_f32"]:
            raise OptionUnavailable("this ai-edge-litert's Python API has no enforce_f32 option (GpuOptions "
                                    "arrived later): an fp32 GPU run is not possible on it") from None
        return compiled_model.from_file(request["model"], hardware_accel=flags)
    options = Options(hardware_accelerators=flags, gpu_options=GpuOptions(enforce_f32=bool(request["enforce_f32"])))
    return compiled_model.from_file(request["model"], options=options)


def _output_details(model, key: str, index: int, path: str) -> dict:
    """{output name: {"shape", "dtype"}} in the order of the model's output buffers. Runtimes before 2.2 have no
    `get_output_tensor_details`: there the names come from the signature (buffer order) and the shapes and
    dtypes from the file through the Interpreter, which every version ships."""
    if hasattr(model, "get_output_tensor_details"):
        return model.get_output_tensor_details(key)
    from ai_edge_litert.interpreter import Interpreter

    found = Interpreter(model_path=path).get_signature_runner(key).get_output_details()
    return {name: {"shape": [int(d) for d in found[name]["shape"]], "dtype": found[name]["dtype"]}
            for name in model.get_signature_by_index(index)["outputs"]}


def main(work: Path) -> int:
    import numpy as np

    request = json.loads((work / "request.json").read_text())
    _stage(work, "compile")
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    flags = {"cpu": HardwareAccelerator.CPU, "gpu": HardwareAccelerator.GPU,
             "gpu+cpu": HardwareAccelerator.GPU | HardwareAccelerator.CPU}[request["accelerator"]]
    payload: dict = {"status": "error", "stage": "compile"}
    start = time.perf_counter()
    try:
        model = _compile(CompiledModel, request, flags)
    except Exception as exc:  # noqa: BLE001 - the runtime raises RuntimeError; anything else is reported the same way
        payload["error"] = f"{type(exc).__name__}: {exc}"
        _write(work, payload)
        return 0
    payload["compile_s"] = time.perf_counter() - start
    try:
        payload["fully_accelerated"] = bool(model.is_fully_accelerated())
    except Exception:  # noqa: BLE001 - reported, not raised
        payload["fully_accelerated"] = None

    payload["stage"] = "run"
    arrays = np.load(work / "inputs.npz")
    out_arrays, outputs, run_s = {}, [], {}
    try:
        for s_i, sig in enumerate(request["signatures"]):
            key = sig["key"]
            index = model.get_signature_index(key)
            _stage(work, f"run:{key}")
            if s_i == 0:
                _test_fault(request["accelerator"])
            in_details = model.get_input_tensor_details(key)
            if _resize_inputs(model, index, key, in_details, sig, arrays):
                in_details = model.get_input_tensor_details(key)
            out_details = _output_details(model, key, index, request["model"])
            in_bufs = model.create_input_buffers(index)
            out_bufs = model.create_output_buffers(index)
            order = list(in_details)
            given = {entry["name"]: arrays[entry["slot"]] for entry in sig["inputs"]}
            missing = [n for n in order if n not in given]
            if missing:
                raise ValueError(f"signature {key!r}: no array for input(s) {missing}")
            for pos, name in enumerate(order):
                want = np.dtype(in_details[name]["dtype"])
                in_bufs[pos].write(np.ascontiguousarray(given[name], dtype=want))
            times = []
            for _ in range(int(request.get("repeats", 1))):
                t0 = time.perf_counter()
                model.run_by_index(index, in_bufs, out_bufs)
                for pos, name in enumerate(out_details):  # reading synchronises the GPU
                    d = out_details[name]
                    n = int(np.prod(d["shape"])) if d["shape"] else 1
                    out_bufs[pos].read(n, np.dtype(d["dtype"]).type)   # the read is part of what is timed
                times.append(time.perf_counter() - t0)
                payload.setdefault("first_run_s", times[0])                # the first run after the compile
            run_s[key] = statistics.median(times)
            payload.setdefault("entry_s", []).append([key, run_s[key]])  # one per entry (samples repeat a key)
            payload.setdefault("times", {})[key] = times                  # every run, first one first
            for o_i, name in enumerate(out_details):
                d = out_details[name]
                n = int(np.prod(d["shape"])) if d["shape"] else 1
                arr = out_bufs[o_i].read(n, np.dtype(d["dtype"]).type).reshape(d["shape"])
                slot = f"s{s_i}_o{o_i}"
                out_arrays[slot] = arr
                outputs.append({"signature": key, "name": name, "slot": slot})
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        payload["error"] = f"{type(exc).__name__}: {exc}"
        payload["traceback"] = traceback.format_exc()
        _write(work, payload)
        return 0
    np.savez(work / "outputs.npz", **out_arrays)
    _stage(work, "done")
    payload.update(status="ok", stage="done", outputs=outputs, run_s=run_s)
    _write(work, payload)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(supervise(Path(sys.argv[1]), int(sys.argv[2])))
    sys.exit(main(Path(sys.argv[1])))
