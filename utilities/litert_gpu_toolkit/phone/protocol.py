"""The runner protocol (version 2): how a model and its inputs travel to a phone and how the outputs come back.

A *job* is a folder:

    job/model.tflite
    job/manifest.txt      what the runner reads (no JSON parser on the phone), one item per line:
                              version 2
                              signature KEY
                              enforce_f32 0|1
                              repeats N
                              input NAME DTYPE in_<i>.raw D0,D1,...      (one line per input, i = 0, 1, ...;
                                                                          "-" for a scalar's empty shape)
    job/manifest.json     the same for people and the host: {"version": 2, "signature": KEY, "accelerator": "gpu",
                          "enforce_f32": false, "repeats": N, "inputs": [{"name", "dtype", "shape", "file"}, ...]}
    job/in_0.raw ...      raw little-endian tensor bytes, C order

Names (KEY, NAME) are the model's own strings and may hold anything: spaces, newlines, "/", "../". So:
  * in manifest.txt every name is percent-encoded: each byte of its UTF-8 form outside [A-Za-z0-9._-] is
    written as "%" and two upper-case hex digits ("x y" -> "x%20y", "a/b" -> "a%2Fb"); a line is split on
    single spaces into exactly the fields above, and a reader decodes %XX back to bytes. An empty name
    cannot be written (refused).
  * in the JSON files names are JSON strings.
  * tensor files are named by position only -- input i is in_<i>.raw, output i is out_<i>.raw -- never from
    a name. A reader refuses a manifest or result whose file field says anything else, so no name and no
    file field can reach a path outside the job folder.

The runner (`runner/litert_gpu_runner.cc` on a phone; `host_runner.py` on this machine, which reads
manifest.txt exactly as the phone does) compiles the model for the GPU accelerator only -- no CPU fallback --
runs the signature `repeats` times, and writes

    job/out/result.json   {"status": "ok" | "compile_failed" | "run_failed" | "bad_request", "error": str|null,
                           "compile_ms": float, "run_ms": [float, ...],
                           "outputs": [{"name", "dtype", "shape", "file": "out_<i>.raw"}, ...]}
    job/out/out_0.raw ...

with names and the error as JSON strings (quote, backslash and control characters escaped). Everything the
runtime logs goes to the runner's stderr, which the host keeps (residency lines).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

PROTOCOL_VERSION = 2
DTYPES = ("float32", "float16", "int32", "int64", "int8", "uint8", "int16", "bool")
_SAFE = re.compile(rb"[A-Za-z0-9._-]")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def encode_name(name: str) -> str:
    """A name as one manifest.txt field: every UTF-8 byte outside [A-Za-z0-9._-] as %XX."""
    if not name:
        raise ValueError("an empty name cannot be written to the runner manifest")
    return "".join(chr(b) if _SAFE.fullmatch(bytes([b])) else f"%{b:02X}" for b in name.encode("utf-8"))


def decode_name(field: str) -> str:
    """The name a manifest.txt field holds (the inverse of `encode_name`)."""
    if not field or "%" in _ESCAPE.sub("", field) or not all(c.isascii() and c.isprintable() for c in field):
        raise ValueError(f"not a percent-encoded name: {field!r}")
    return re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]),
                  field.encode("ascii")).decode("utf-8")


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
        encode_name(name)                                   # refuses an empty name before anything is written
        fname = f"in_{i}.raw"
        (job / fname).write_bytes(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
        entries.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape), "file": fname})
    repeats = int(max(1, repeats))
    manifest = {"version": PROTOCOL_VERSION, "signature": signature, "accelerator": "gpu",
                "enforce_f32": bool(enforce_f32), "repeats": repeats, "inputs": entries}
    (job / "manifest.json").write_text(json.dumps(manifest, indent=1))
    lines = [f"version {PROTOCOL_VERSION}", f"signature {encode_name(signature)}",
             f"enforce_f32 {int(bool(enforce_f32))}", f"repeats {repeats}"]
    lines += [f"input {encode_name(e['name'])} {e['dtype']} {e['file']} {','.join(map(str, e['shape'])) or '-'}"
              for e in entries]
    (job / "manifest.txt").write_text("\n".join(lines) + "\n")
    return job


def _dims(field: str) -> list[int]:
    if field == "-":
        return []
    dims = [int(d) for d in field.split(",")]
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in {field!r}")
    return dims


def parse_manifest_txt(text: str) -> dict:
    """manifest.txt as a dict shaped like manifest.json; ValueError for anything the format does not allow."""
    manifest: dict = {"accelerator": "gpu", "enforce_f32": False, "repeats": 1, "inputs": []}
    for n, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        fields = line.split(" ")
        key, want = fields[0], {"version": 2, "signature": 2, "enforce_f32": 2, "repeats": 2, "input": 5}
        if key not in want or len(fields) != want[key]:
            raise ValueError(f"manifest.txt line {n}: not a manifest line: {line[:80]!r}")
        if key == "version":
            manifest["version"] = int(fields[1])
        elif key == "signature":
            manifest["signature"] = decode_name(fields[1])
        elif key == "enforce_f32":
            manifest["enforce_f32"] = fields[1] == "1"
        elif key == "repeats":
            manifest["repeats"] = max(1, int(fields[1]))
        else:
            i = len(manifest["inputs"])
            _, name, dtype, fname, dims = fields
            if dtype not in DTYPES:
                raise ValueError(f"manifest.txt line {n}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
            if fname != f"in_{i}.raw":
                raise ValueError(f"manifest.txt line {n}: input {i} must be in in_{i}.raw, not {fname!r}")
            manifest["inputs"].append({"name": decode_name(name), "dtype": dtype, "shape": _dims(dims),
                                       "file": fname})
    if manifest.get("version") != PROTOCOL_VERSION:
        raise ValueError(f"manifest version {manifest.get('version')} != {PROTOCOL_VERSION}")
    if "signature" not in manifest:
        raise ValueError("manifest.txt names no signature")
    return manifest


def _read_tensor(folder: Path, entry: dict, fname: str) -> np.ndarray:
    """The array a manifest / result entry describes, from `fname` (chosen by position, never by the entry)."""
    if entry.get("file") != fname:
        raise ValueError(f"tensor {entry.get('name')!r} must be in {fname}, not {entry.get('file')!r}")
    dtype = np.dtype(entry["dtype"])
    data = np.frombuffer((folder / fname).read_bytes(), dtype=dtype.newbyteorder("<"))
    return data.reshape([int(d) for d in entry["shape"]]).astype(dtype)


def read_manifest(job: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(the manifest, {input name: array}) as the runner sees them: from manifest.txt, as a phone reads it."""
    manifest = parse_manifest_txt((job / "manifest.txt").read_text(encoding="utf-8"))
    arrays = {e["name"]: _read_tensor(job, e, f"in_{i}.raw") for i, e in enumerate(manifest["inputs"])}
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
    """(result.json, {output name: array}); ValueError for an output file not named out_<i>.raw."""
    result = json.loads((out_dir / "result.json").read_text())
    arrays = {e["name"]: _read_tensor(out_dir, e, f"out_{i}.raw") for i, e in enumerate(result.get("outputs", []))}
    return result, arrays
