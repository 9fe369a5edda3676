"""The runner protocol (version 2): how a model and its inputs travel to a runner and how the outputs come back.

The same job folder serves the phone (pushed over adb), this machine's native runner (`--device host-native`,
where push and pull are local copies) and the Python twin (`host_runner.py`). A *job* is a folder:

    job/model.tflite
    job/manifest.json     {"protocol": "litert-gpu-runner", "version": 2, "accelerator": "gpu" | "cpu",
                           "enforce_f32": false, "repeats": N,
                           "entries": [{"signature": KEY,
                                        "inputs": [{"name": NAME, "dtype": DTYPE, "shape": [d0, ...]}, ...]}, ...]}
    job/in_<e>_<i>.raw    input i of entry e: raw little-endian tensor bytes, C order

The runner compiles the model once (accelerator "gpu": GPU only, no CPU fallback; "cpu": LiteRT's CPU path),
runs every entry `repeats` times, and writes

    job/out/result.json   {"protocol": ..., "version": 2, "status": "ok" | "bad_request" | "compile_failed" |
                           "run_failed", "error": str | null, "stage": str, "accelerator": ..., "enforce_f32": ...,
                           "compile_ms": float | null, "fully_accelerated": bool | null,
                           "gpu_fully_accelerated": bool | null,
                           "cache": {"key": str, "files_before": int, "files_after": int}   (only with --cache-dir)
                           "entries": [{"signature": KEY, "run_ms": [...],
                                        "outputs": [{"name": NAME, "dtype": DTYPE, "shape": [...]}, ...]}, ...]}
    job/out/out_<e>_<o>.raw

Shape buckets: an entry whose signature is "seq_*", "img_*" or "audio_*" (BUCKET_REQUESTS) runs, of the model's
signatures in that family (`export --seq-len / --image-size / --audio-seconds` with several sizes), the smallest
whose every input holds the entry's input of that name -- same dtype and rank, no dimension smaller -- each input
padded at the end of every dimension with zeros (text: token 0, mask 0, never attended to; images and audio: zeros
the model sees, runtime/buckets.py). Its record names the signature that ran, and its outputs are that bucket's:
the caller keeps the leading part. An entry no bucket holds is a bad request.

`--cache-dir DIR` (a runner argument the host chooses, never a manifest field) turns on the GPU program cache in
DIR, keyed by a hash of model.tflite's bytes and the precision (docs/performance.md).

Why it is built this way (the hardening): names -- input, output and signature names -- are JSON strings, so a
name with a space, a quote, a newline or `../` is just a string; they are matched byte for byte against the
model's names and never become part of a path. Every file name is made from indices by whoever writes the file;
no path is ever read from a manifest, a result or a model. Sizes come from the model (runner) or from the
declared dtype and shape (host) and must match each file exactly. Everything the runtime logs goes to the
runner's stderr, which the host keeps (residency lines).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

PROTOCOL = "litert-gpu-runner"
PROTOCOL_VERSION = 2
DTYPES = ("float32", "float16", "int32", "int64", "int16", "int8", "uint8", "bool")
STATUSES = ("ok", "bad_request", "compile_failed", "run_failed")
MAX_RANK = 8
BUCKET_REQUESTS = ("seq_*", "img_*", "audio_*")   # an entry's signature: the smallest bucket of that family
MAX_RESULT_BYTES = 64 << 20


class ProtocolError(ValueError):
    """A manifest or result that does not follow the protocol (a bug or a tampered file, never a model fault)."""


def input_file(entry: int, index: int) -> str:
    return f"in_{int(entry)}_{int(index)}.raw"


def output_file(entry: int, index: int) -> str:
    return f"out_{int(entry)}_{int(index)}.raw"


def _raw(arr: np.ndarray) -> bytes:
    arr = np.ascontiguousarray(arr)
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def write_job(job: Path, model_path: Path, entries: list[tuple[str, dict[str, np.ndarray]]], *,
              accelerator: str = "gpu", enforce_f32: bool = False, repeats: int = 1) -> Path:
    """Lay out a job folder: `entries` is a list of (signature key, {input name: array}), run in order."""
    if accelerator not in ("gpu", "cpu"):
        raise ValueError(f"accelerator must be 'gpu' or 'cpu', got {accelerator!r}")
    if not entries:
        raise ValueError("a job needs at least one entry")
    job = Path(job)
    job.mkdir(parents=True, exist_ok=True)
    (job / "model.tflite").write_bytes(Path(model_path).read_bytes())
    manifest_entries = []
    for e, (key, named) in enumerate(entries):
        inputs = []
        for i, (name, arr) in enumerate(named.items()):
            arr = np.asarray(arr)
            if arr.dtype.name not in DTYPES:
                raise ValueError(f"input {name!r}: dtype {arr.dtype} is not carried by the runner protocol")
            if arr.ndim > MAX_RANK:
                raise ValueError(f"input {name!r}: rank {arr.ndim} > {MAX_RANK}")
            (job / input_file(e, i)).write_bytes(_raw(arr))
            inputs.append({"name": str(name), "dtype": arr.dtype.name, "shape": [int(d) for d in arr.shape]})
        manifest_entries.append({"signature": str(key), "inputs": inputs})
    manifest = {"protocol": PROTOCOL, "version": PROTOCOL_VERSION, "accelerator": accelerator,
                "enforce_f32": bool(enforce_f32), "repeats": int(max(1, repeats)), "entries": manifest_entries}
    (job / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=True))
    return job


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape(value, where: str) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_RANK or \
            not all(_is_int(d) and 0 <= d <= 2**31 - 1 for d in value):
        raise ProtocolError(f"{where}: shape must be a list of at most {MAX_RANK} sizes from 0 to 2^31-1")
    return value


def _dtype(value, where: str) -> np.dtype:
    if value not in DTYPES:
        raise ProtocolError(f"{where}: dtype must be one of {', '.join(DTYPES)}")
    return np.dtype(value)


def _only(obj: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ProtocolError(f"{where}: unknown field(s) {unknown}")


def _load_json(path: Path, limit: int) -> dict:
    try:
        if path.is_symlink() or not path.is_file():
            raise ProtocolError(f"{path.name} is missing or not a regular file")
        if path.stat().st_size > limit:
            raise ProtocolError(f"{path.name} is larger than {limit} bytes")

        def no_duplicates(pairs):
            keys = [k for k, _ in pairs]
            if len(keys) != len(set(keys)):
                raise ProtocolError(f"{path.name}: a key appears twice")
            return dict(pairs)

        def no_constants(name):
            raise ProtocolError(f"{path.name}: {name} is not valid JSON")

        data = json.loads(path.read_bytes().decode("utf-8"), object_pairs_hook=no_duplicates,
                          parse_constant=no_constants)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"{path.name} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{path.name} is not a JSON object")
    return data


def _read_array(path: Path, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if shape else dtype.itemsize
    if path.is_symlink() or not path.is_file():
        raise ProtocolError(f"{path.name} is missing or not a regular file")
    size = path.stat().st_size
    if size != want:
        raise ProtocolError(f"{path.name} holds {size} bytes; dtype {dtype.name} shape {shape} needs {want}")
    data = np.frombuffer(path.read_bytes(), dtype=dtype.newbyteorder("<"))
    return data.reshape(shape).astype(dtype)


def read_manifest(job: Path) -> tuple[dict, list[tuple[str, dict[str, np.ndarray]]]]:
    """The manifest (validated with the native runner's rules) and its entries as (key, {name: array})."""
    job = Path(job)
    manifest = _load_json(job / "manifest.json", 16 << 20)
    _only(manifest, {"protocol", "version", "accelerator", "enforce_f32", "repeats", "entries"}, "manifest")
    if manifest.get("protocol") != PROTOCOL or manifest.get("version") != PROTOCOL_VERSION:
        raise ProtocolError(f"manifest: not {PROTOCOL} version {PROTOCOL_VERSION}")
    if manifest.get("accelerator") not in ("gpu", "cpu"):
        raise ProtocolError("manifest: accelerator must be 'gpu' or 'cpu'")
    if not isinstance(manifest.get("enforce_f32", False), bool):
        raise ProtocolError("manifest: enforce_f32 must be true or false")
    repeats = manifest.get("repeats", 1)
    if not _is_int(repeats) or not 1 <= repeats <= 1000:
        raise ProtocolError("manifest: repeats must be an integer from 1 to 1000")
    entries = manifest.get("entries")
    if not isinstance(entries, list) or not entries:
        raise ProtocolError("manifest: entries must be a non-empty list")
    out = []
    for e, entry in enumerate(entries):
        where = f"manifest entry {e}"
        if not isinstance(entry, dict):
            raise ProtocolError(f"{where} is not an object")
        _only(entry, {"signature", "inputs"}, where)
        if not isinstance(entry.get("signature"), str) or not isinstance(entry.get("inputs"), list):
            raise ProtocolError(f"{where}: needs a string signature and a list of inputs")
        arrays: dict[str, np.ndarray] = {}
        for i, spec in enumerate(entry["inputs"]):
            iwhere = f"{where} input {i}"
            if not isinstance(spec, dict):
                raise ProtocolError(f"{iwhere} is not an object")
            _only(spec, {"name", "dtype", "shape"}, iwhere)
            name = spec.get("name")
            if not isinstance(name, str):
                raise ProtocolError(f"{iwhere}: name must be a string")
            if name in arrays:
                raise ProtocolError(f"{iwhere}: name {name!r} given twice")
            arrays[name] = _read_array(job / input_file(e, i), _dtype(spec.get("dtype"), iwhere),
                                       _shape(spec.get("shape"), iwhere))
        out.append((entry["signature"], arrays))
    return manifest, out


def write_outputs(out_dir: Path, status: str, *, entries: list[tuple[str, dict[str, np.ndarray], list[float]]]
                  | None = None, error: str | None = None, stage: str = "done", accelerator: str = "gpu",
                  enforce_f32: bool = False, compile_ms: float | None = None, fully_accelerated: bool | None = None,
                  gpu_fully_accelerated: bool | None = None) -> None:
    """What a runner writes: result.json and out_<e>_<o>.raw (`entries`: (key, {output name: array}, run_ms))."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for e, (key, outputs, run_ms) in enumerate(entries or []):
        outs = []
        for o, (name, arr) in enumerate(outputs.items()):
            arr = np.asarray(arr)
            (out_dir / output_file(e, o)).write_bytes(_raw(arr))
            outs.append({"name": str(name), "dtype": arr.dtype.name, "shape": [int(d) for d in arr.shape]})
        records.append({"signature": str(key), "run_ms": [float(t) for t in run_ms], "outputs": outs})
    result = {"protocol": PROTOCOL, "version": PROTOCOL_VERSION, "status": status, "error": error, "stage": stage,
              "accelerator": accelerator, "enforce_f32": bool(enforce_f32), "compile_ms": compile_ms,
              "fully_accelerated": fully_accelerated, "gpu_fully_accelerated": gpu_fully_accelerated,
              "entries": records}
    tmp = out_dir / "result.json.tmp"
    tmp.write_text(json.dumps(result, indent=1, ensure_ascii=True))
    tmp.replace(out_dir / "result.json")


def _number_or_none(value, where: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ProtocolError(f"{where} must be a non-negative number or null")
    return float(value)


def read_outputs(out_dir: Path) -> tuple[dict, list[tuple[str, dict[str, np.ndarray]]]]:
    """A runner's result.json (validated) and, when it ran, each entry's outputs as (key, {name: array})."""
    out_dir = Path(out_dir)
    result = _load_json(out_dir / "result.json", MAX_RESULT_BYTES)
    if result.get("protocol") != PROTOCOL or result.get("version") != PROTOCOL_VERSION:
        raise ProtocolError(f"result.json: not {PROTOCOL} version {PROTOCOL_VERSION}")
    if result.get("status") not in STATUSES:
        raise ProtocolError(f"result.json: unknown status {result.get('status')!r}")
    if result.get("error") is not None and not isinstance(result["error"], str):
        raise ProtocolError("result.json: error must be a string or null")
    result["compile_ms"] = _number_or_none(result.get("compile_ms"), "result.json: compile_ms")
    entries = result.get("entries")
    if not isinstance(entries, list):
        raise ProtocolError("result.json: entries must be a list")
    out = []
    for e, entry in enumerate(entries):
        where = f"result.json entry {e}"
        if not isinstance(entry, dict) or not isinstance(entry.get("signature"), str) or \
                not isinstance(entry.get("outputs"), list) or not isinstance(entry.get("run_ms"), list):
            raise ProtocolError(f"{where}: needs a signature, run_ms and outputs")
        entry["run_ms"] = [_number_or_none(t, f"{where}: run_ms") for t in entry["run_ms"]]
        arrays: dict[str, np.ndarray] = {}
        for o, spec in enumerate(entry["outputs"]):
            owhere = f"{where} output {o}"
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ProtocolError(f"{owhere}: needs a string name")
            if spec["name"] in arrays:
                raise ProtocolError(f"{owhere}: name {spec['name']!r} given twice")
            arrays[spec["name"]] = _read_array(out_dir / output_file(e, o), _dtype(spec.get("dtype"), owhere),
                                               _shape(spec.get("shape"), owhere))
        out.append((entry["signature"], arrays))
    return result, out
