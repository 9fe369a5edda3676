"""Child-process side of `runtime.compile_and_run` (internal; run as `python -m litert_gpu_toolkit._worker DIR`).

Reads DIR/request.json and DIR/inputs.npz, compiles once, runs each requested signature, writes
DIR/outputs.npz and DIR/result.json. Anything the native runtime prints goes to stderr, which the
parent captures. A crash here leaves no result.json, which the parent reports as a crash.
"""
from __future__ import annotations

import json
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


def main(work: Path) -> int:
    request = json.loads((work / "request.json").read_text())
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
    payload.update(status="ok", stage="done", outputs=outputs, run_s=run_s)
    _write(work, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
