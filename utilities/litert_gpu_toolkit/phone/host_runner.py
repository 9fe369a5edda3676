"""The runner protocol implemented with this machine's LiteRT Python runtime: the Python twin of the native runner.

`python -m litert_gpu_toolkit.phone.host_runner --manifest JOB/manifest.json --out JOB/out`

It behaves like the native runner (`runner/litert_gpu_runner.cc`): one compile (GPU only, no CPU fallback; or the
CPU), every entry run `repeats` times, outputs as raw files, runtime log on stderr, the same exit status (0 ok,
1 the model failed to compile or run, 2 bad request). The test double for adb (`tests/toolkit/phone/fakes/adb`)
runs it in place of the phone binary unless told to run the native one. It is not a phone result and is never
labelled as one.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .protocol import BUCKET_REQUESTS, ProtocolError, read_manifest, write_outputs


def _bucket_entry(model, family: str, inputs: dict[str, np.ndarray]) -> tuple[str, dict[str, np.ndarray]]:
    """A bucket entry as the native runner reads it: of the signatures whose key starts with `family` ("seq_",
    "img_", "audio_"), the smallest whose every input holds the entry's input of that name (same dtype and rank, no
    dimension smaller), each input zero-padded at the end of every dimension. ValueError (a bad request) says why
    not."""
    best, in_family = None, 0
    for key in model.get_signature_list():
        if not key.startswith(family):
            continue
        in_family += 1
        details = model.get_input_tensor_details(key)
        if set(details) != set(inputs):
            continue
        shapes = {name: tuple(int(d) for d in details[name]["shape"]) for name in details}
        holds = all(np.dtype(details[n]["dtype"]) == np.asarray(a).dtype and len(shapes[n]) == np.ndim(a)
                    and all(g <= w for g, w in zip(np.shape(a), shapes[n])) for n, a in inputs.items())
        size = sum(int(np.prod(s)) for s in shapes.values())
        if holds and (best is None or size < best[0]):
            best = (size, key, shapes)
    if in_family == 0:
        raise ValueError(f"the model has no {family}<N> bucket signatures")
    if best is None:
        given = ", ".join(f"{n!r} {list(np.shape(a))}" for n, a in inputs.items())
        raise ValueError(f"no {family}<N> bucket holds the entry's inputs ({given})")
    _, key, shapes = best
    return key, {n: np.pad(np.asarray(a), [(0, w - g) for g, w in zip(np.shape(a), shapes[n])])
                 for n, a in inputs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cache-dir", type=Path, help="accepted for the native runner's sake; the Python API has "
                                                       "no GPU program cache, so nothing is cached")
    args = parser.parse_args(argv)
    if args.cache_dir is not None:
        print("host_runner: --cache-dir ignored: LiteRT's Python API has no GPU program cache", file=sys.stderr)
    job = args.manifest.parent
    try:
        manifest, entries = read_manifest(job)
    except ProtocolError as exc:
        print(f"host_runner: bad_request: {exc}", file=sys.stderr)
        write_outputs(args.out, "bad_request", error=str(exc), stage="manifest")
        return 2

    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.gpu_options import GpuOptions
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import Options

    gpu = manifest["accelerator"] == "gpu"
    enforce_f32 = bool(manifest.get("enforce_f32"))
    common = {"accelerator": manifest["accelerator"], "enforce_f32": enforce_f32}
    options = Options(hardware_accelerators=HardwareAccelerator.GPU if gpu else HardwareAccelerator.CPU,
                      gpu_options=GpuOptions(enforce_f32=enforce_f32) if gpu else None)
    t0 = time.perf_counter()
    try:
        model = CompiledModel.from_file(str(job / "model.tflite"), options=options)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        print(f"compile failed: {exc}", file=sys.stderr)
        write_outputs(args.out, "compile_failed", error=str(exc), stage="compile", **common)
        return 1
    compile_ms = (time.perf_counter() - t0) * 1e3
    try:
        fully = bool(model.is_fully_accelerated())
    except Exception:  # noqa: BLE001 - a fact we may not get; reported as unknown
        fully = None
    done = []
    for e, (key, inputs) in enumerate(entries):
        stage = f"run:{key}"
        if key in BUCKET_REQUESTS:
            try:
                key, inputs = _bucket_entry(model, key[:-1], inputs)
            except ValueError as exc:
                write_outputs(args.out, "bad_request", error=f"entry {e}: {exc}", stage=stage, compile_ms=compile_ms,
                              **common)
                return 2
            stage = f"run:{key}"
        try:
            index = model.get_signature_index(key)
            in_details = model.get_input_tensor_details(key)
            out_details = model.get_output_tensor_details(key)
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            write_outputs(args.out, "bad_request", error=f"entry {e}: no signature {key!r} ({exc})", stage=stage,
                          compile_ms=compile_ms, **common)
            return 2
        if set(inputs) != set(in_details):
            write_outputs(args.out, "bad_request", stage=stage, compile_ms=compile_ms, **common,
                          error=f"entry {e}: inputs {sorted(inputs)}; the signature takes {sorted(in_details)}")
            return 2
        try:
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
            write_outputs(args.out, "run_failed", error=str(exc), stage=stage, compile_ms=compile_ms, **common)
            return 1
        done.append((key, outputs, run_ms))
    write_outputs(args.out, "ok", entries=done, compile_ms=compile_ms, fully_accelerated=fully, **common)
    return 0


if __name__ == "__main__":
    sys.exit(main())
