"""Child-process side of `runtime.compile_and_run` (internal; run as `python -m litert_gpu_toolkit._worker DIR`).

Reads DIR/request.json and DIR/inputs.npz, compiles once, runs each requested signature, writes
DIR/outputs.npz and DIR/result.json. Anything the native runtime prints goes to stderr, which the
parent captures. A crash here leaves no result.json, which the parent reports as a crash.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np


def _write(work: Path, payload: dict) -> None:
    tmp = work / "result.json.tmp"
    tmp.write_text(json.dumps(payload))
    tmp.replace(work / "result.json")


# Test double (tests only): LITERT_GPU_TOOLKIT_TEST_FAULT=crash|hang[@cpu|@gpu|@gpu+cpu] makes this child abort
# (SIGABRT) or hang after compiling, before the first run, so tests can prove the parent survives both.
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


def main(work: Path) -> int:
    request = json.loads((work / "request.json").read_text())
    _stage(work, "compile")
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.gpu_options import GpuOptions
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import Options

    flags = {"cpu": HardwareAccelerator.CPU, "gpu": HardwareAccelerator.GPU,
             "gpu+cpu": HardwareAccelerator.GPU | HardwareAccelerator.CPU}[request["accelerator"]]
    options = Options(hardware_accelerators=flags,
                      gpu_options=GpuOptions(enforce_f32=bool(request["enforce_f32"])))
    payload: dict = {"status": "error", "stage": "compile"}
    start = time.perf_counter()
    try:
        model = CompiledModel.from_file(request["model"], options=options)
    except Exception as exc:  # the runtime raises RuntimeError; anything else is reported the same way
        payload["error"] = f"{type(exc).__name__}: {exc}"
        _write(work, payload)
        return 0
    payload["compile_s"] = time.perf_counter() - start
    try:
        payload["fully_accelerated"] = bool(model.is_fully_accelerated())
    except Exception:
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
            out_details = model.get_output_tensor_details(key)
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
                    data = out_bufs[pos].read(n, np.dtype(d["dtype"]))
                times.append(time.perf_counter() - t0)
            run_s[key] = statistics.median(times)
            payload.setdefault("entry_s", []).append([key, run_s[key]])  # one per entry (samples repeat a key)
            for o_i, name in enumerate(out_details):
                d = out_details[name]
                n = int(np.prod(d["shape"])) if d["shape"] else 1
                arr = out_bufs[o_i].read(n, np.dtype(d["dtype"])).reshape(d["shape"])
                slot = f"s{s_i}_o{o_i}"
                out_arrays[slot] = arr
                outputs.append({"signature": key, "name": name, "slot": slot})
    except Exception as exc:
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
    sys.exit(main(Path(sys.argv[1])))
