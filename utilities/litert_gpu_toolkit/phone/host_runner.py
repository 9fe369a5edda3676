"""The runner protocol implemented with this machine's LiteRT Python runtime.

`python -m litert_gpu_toolkit.phone.host_runner --manifest JOB/manifest.json --out JOB/out`

It behaves like the on-phone C++ runner (`runner/litert_gpu_runner.cc`): it reads the job's manifest.txt (the
line format, names percent-encoded, see `protocol.py`) as the phone does, strict GPU-only compile,
`repeats` timed runs, outputs as raw files, runtime log on stderr. The test double for adb
(`tests/toolkit/phone/fakes/adb`) runs it in place of the phone binary, so the whole --device path is exercised
on a machine without a phone. It is not a phone result and is never labelled as one.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .protocol import read_manifest, write_outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    job = args.manifest.parent
    try:
        manifest, inputs = read_manifest(job)
    except (OSError, ValueError, KeyError) as exc:
        write_outputs(args.out, "bad_request", error=str(exc))
        return 2

    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.gpu_options import GpuOptions
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import Options

    options = Options(hardware_accelerators=HardwareAccelerator.GPU,
                      gpu_options=GpuOptions(enforce_f32=bool(manifest.get("enforce_f32"))))
    t0 = time.perf_counter()
    try:
        model = CompiledModel.from_file(str(job / "model.tflite"), options=options)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        print(f"compile failed: {exc}", file=sys.stderr)
        write_outputs(args.out, "compile_failed", error=str(exc))
        return 1
    compile_ms = (time.perf_counter() - t0) * 1e3
    key = manifest["signature"]
    try:
        index = model.get_signature_index(key)
        in_details = model.get_input_tensor_details(key)
        out_details = model.get_output_tensor_details(key)
        in_bufs, out_bufs = model.create_input_buffers(index), model.create_output_buffers(index)
        for pos, name in enumerate(in_details):
            in_bufs[pos].write(np.ascontiguousarray(inputs[name], dtype=np.dtype(in_details[name]["dtype"])))
        run_ms, outputs = [], {}
        for _ in range(int(manifest.get("repeats", 1))):
            t0 = time.perf_counter()
            model.run_by_index(index, in_bufs, out_bufs)
            for pos, name in enumerate(out_details):
                d = out_details[name]
                n = int(np.prod(d["shape"])) if d["shape"] else 1
                outputs[name] = out_bufs[pos].read(n, np.dtype(d["dtype"])).reshape(d["shape"])
            run_ms.append((time.perf_counter() - t0) * 1e3)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        print(f"run failed: {exc}", file=sys.stderr)
        write_outputs(args.out, "run_failed", error=str(exc), compile_ms=compile_ms)
        return 1
    write_outputs(args.out, "ok", outputs=outputs, compile_ms=compile_ms, run_ms=run_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
