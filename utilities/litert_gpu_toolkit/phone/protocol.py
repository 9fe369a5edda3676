"""The runner protocol: how a model and its inputs travel to a phone and how the outputs come back.

A *job* is a folder:

    job/model.tflite
    job/manifest.txt      the same, one item per line, for the C++ runner (no JSON parser on the phone):
                            signature KEY / enforce_f32 0|1 / repeats N / input NAME DTYPE FILE d0,d1,...
    job/manifest.json     {"version": 1, "signature": KEY, "accelerator": "gpu", "enforce_f32": false,
                           "repeats": N, "inputs": [{"name", "dtype", "shape", "file"}, ...]}
    job/in_0.raw ...      raw little-endian tensor bytes, C order

The runner (`runner/litert_gpu_runner.cc` on a phone; `host_runner.py` on this machine) compiles the
model for the GPU accelerator only -- no CPU fallback -- runs the signature `repeats` times, and writes

    job/out/result.json   {"status": "ok" | "compile_failed" | "run_failed" | "bad_request", "error": str|null,
                           "compile_ms": float, "run_ms": [float, ...],
                           "outputs": [{"name", "dtype", "shape", "file"}, ...]}
    job/out/out_0.raw ...

Everything the runtime logs goes to the runner's stderr, which the host keeps (residency lines).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PROTOCOL_VERSION = 1
DTYPES = ("float32", "float16", "int32", "int64", "int8", "uint8", "int16", "bool")


def write_job(job: Path, model_path: Path, signature: str, inputs: dict[str, np.ndarray], *,
              enforce_f32: bool = False, repeats: int = 1) -> Path:
    """Lay out a job folder on the host."""
    job.mkdir(parents=True, exist_ok=True)
    (job / "model.tflite").write_bytes(Path(model_path).read_bytes())
    entries = []
    for i, (name, arr) in enumerate(inputs.items()):
        arr = np.ascontiguousarray(arr)
        if arr.dtype.name not in DTYPES:
            raise ValueError(f"input {name!r}: dtype {arr.dtype} is not supported by the runner protocol")
        fname = f"in_{i}.raw"
        (job / fname).write_bytes(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
        entries.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape), "file": fname})
    manifest = {"version": PROTOCOL_VERSION, "signature": signature, "accelerator": "gpu",
                "enforce_f32": bool(enforce_f32), "repeats": int(max(1, repeats)), "inputs": entries}
    (job / "manifest.json").write_text(json.dumps(manifest, indent=1))
    lines = [f"signature {signature}", f"enforce_f32 {int(bool(enforce_f32))}", f"repeats {manifest['repeats']}"]
    lines += [f"input {e['name']} {e['dtype']} {e['file']} {','.join(map(str, e['shape'])) or '-'}" for e in entries]
    (job / "manifest.txt").write_text("\n".join(lines) + "\n")
    return job


def read_manifest(job: Path) -> tuple[dict, dict[str, np.ndarray]]:
    manifest = json.loads((job / "manifest.json").read_text())
    if manifest.get("version") != PROTOCOL_VERSION:
        raise ValueError(f"manifest version {manifest.get('version')} != {PROTOCOL_VERSION}")
    arrays = {}
    for e in manifest["inputs"]:
        data = np.frombuffer((job / e["file"]).read_bytes(), dtype=np.dtype(e["dtype"]).newbyteorder("<"))
        arrays[e["name"]] = data.reshape(e["shape"]).astype(np.dtype(e["dtype"]))
    return manifest, arrays


def write_outputs(out_dir: Path, status: str, *, outputs: dict[str, np.ndarray] | None = None,
                  error: str | None = None, compile_ms: float | None = None, run_ms: list[float] | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, (name, arr) in enumerate((outputs or {}).items()):
        arr = np.ascontiguousarray(arr)
        fname = f"out_{i}.raw"
        (out_dir / fname).write_bytes(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
        entries.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape), "file": fname})
    result = {"status": status, "error": error, "compile_ms": compile_ms, "run_ms": run_ms or [], "outputs": entries}
    (out_dir / "result.json").write_text(json.dumps(result, indent=1))


def read_outputs(out_dir: Path) -> tuple[dict, dict[str, np.ndarray]]:
    result = json.loads((out_dir / "result.json").read_text())
    arrays = {}
    for e in result.get("outputs", []):
        data = np.frombuffer((out_dir / e["file"]).read_bytes(), dtype=np.dtype(e["dtype"]).newbyteorder("<"))
        arrays[e["name"]] = data.reshape(e["shape"]).astype(np.dtype(e["dtype"]))
    return result, arrays
