"""From a verify script's inputs to a runner job and back: what the phone and `--device host-native` share.

`entries_of` turns {signature: {name: array} | [samples]} into the job's ordered entries (one per sample, so one
compile serves them all); `matched_to_model` casts each array to the dtype the model's input has (as the Python
path does before it writes a buffer); `fill_result` reads the pulled out/ folder into a `RunResult` with the same
statuses and the same stacking of samples as `runtime.compile_and_run`.
"""
from __future__ import annotations

import signal
from pathlib import Path

import numpy as np

from ..runtime.compiled import (OUTSIDE_SIGNALS, STATUS_COMPILE_ERROR, STATUS_CRASH, STATUS_KILLED, STATUS_NO_GPU,
                                STATUS_OK, STATUS_OPS_REJECTED, STATUS_RUN_ERROR, RunResult, parse_gpu_log)
from .protocol import BUCKET_REQUESTS, ProtocolError, read_outputs

CACHE_READ_LINE = "Initialized InferenceContext from serialized data"


def entries_of(inputs: dict) -> tuple[list[tuple[str, dict[str, np.ndarray]]], set[str]]:
    """(entries in order, the signatures given as a list of samples)."""
    entries, sampled = [], set()
    for key, given in inputs.items():
        if isinstance(given, (list, tuple)):
            sampled.add(key)
            entries += [(key, dict(named)) for named in given]
        else:
            entries.append((key, dict(given)))
    return entries, sampled


def matched_to_model(model_path, entries: list[tuple[str, dict[str, np.ndarray]]]):
    """Each array cast to its model input's dtype (e.g. an int64 token array for an int32 input), like the
    Python path's buffer write. Names and shapes are left for the runner to check."""
    from ..core.model_info import InvalidModelError, numpy_dtype, read_model_info

    try:
        info = read_model_info(model_path)
    except (InvalidModelError, OSError):
        return entries   # the runner will say what is wrong with the file
    wanted = {}
    for sig in info.signatures:
        for name, tensor in sig.inputs.items():
            try:
                wanted[(sig.key, name)] = numpy_dtype(tensor.dtype)
                for request in BUCKET_REQUESTS:          # a bucket entry takes its family's dtypes (all alike)
                    if sig.key.startswith(request[:-1]):
                        wanted.setdefault((request, name), numpy_dtype(tensor.dtype))
            except TypeError:
                continue
    return [(key, {name: np.asarray(arr, dtype=wanted.get((key, name), np.asarray(arr).dtype))
                   for name, arr in named.items()}) for key, named in entries]


def classify(status: str, log: str, accelerator: str) -> str:
    """A runner's result status -> a RunResult status (the same rules as runtime._classify)."""
    if status == "ok":
        return STATUS_OK
    if status == "compile_failed":
        gpu = parse_gpu_log(log)
        if accelerator == "gpu" and gpu.no_gpu_reason and not gpu.rejected:
            return STATUS_NO_GPU
        if gpu.rejected or gpu.gpu_ops is not None:
            return STATUS_OPS_REJECTED
        return STATUS_COMPILE_ERROR
    return STATUS_RUN_ERROR   # run_failed, and bad_request (the runner refused the job: the error says why)


def fill_result(result: RunResult, out_dir: Path, returncode: int | None, log: str, sampled: set[str]) -> RunResult:
    """Fill `result` from a runner's exit status, its stderr and the pulled out/ folder."""
    result.log, result.returncode = log, returncode
    result.gpu = parse_gpu_log(log)
    payload, entries = None, []
    if (out_dir / "result.json").exists():
        try:
            payload, entries = read_outputs(out_dir)
        except ProtocolError as exc:
            result.status, result.error = STATUS_CRASH, f"the runner's result is not usable: {exc}"
            return result
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        result.status = STATUS_KILLED if sig in [int(s) for s in OUTSIDE_SIGNALS] else STATUS_CRASH
        result.error = f"the runner was killed by signal {sig} ({name})" + \
            (f" during {payload['stage']}" if payload else " without a result")
        return result
    if payload is None:
        result.status = STATUS_CRASH
        result.error = f"the runner exited with status {returncode} without a result"
        return result
    result.stage = payload.get("stage")
    result.compile_s = payload["compile_ms"] / 1e3 if payload.get("compile_ms") is not None else None
    result.fully_accelerated = payload.get("fully_accelerated")
    if isinstance(payload.get("cache"), dict):
        # the accelerator logs this line only when it built the model from the cached programs
        result.cache = {**payload["cache"], "read": CACHE_READ_LINE in log}
    result.status = classify(payload["status"], log, result.accelerator)
    if payload["status"] != "ok":
        prefix = "the runner refused the job: " if payload["status"] == "bad_request" else ""
        result.error = prefix + (payload.get("error") or payload["status"])
        return result
    if returncode not in (0, None):
        result.status, result.error = STATUS_CRASH, f"the runner reported ok but exited with status {returncode}"
        return result
    rows: dict[str, dict[str, list]] = {}
    times: dict[str, list[float]] = {}
    for (key, arrays), record in zip(entries, payload["entries"]):
        for name, arr in arrays.items():
            rows.setdefault(key, {}).setdefault(name, []).append(arr)
        times.setdefault(key, []).append(float(np.median(record["run_ms"] or [0.0])) / 1e3)
        result.times.setdefault(key, []).extend(t / 1e3 for t in record["run_ms"])
        if result.first_run_s is None and record["run_ms"]:
            result.first_run_s = record["run_ms"][0] / 1e3          # the job's first entry runs first
    for request in set(BUCKET_REQUESTS) & sampled:     # samples asked for by size: stacked per bucket that ran them
        sampled = sampled | {key for key in rows if key.startswith(request[:-1])}
    result.outputs = {key: {name: (np.stack(v) if key in sampled else v[-1]) for name, v in named.items()}
                      for key, named in rows.items()}
    result.run_s = {key: float(np.median(t)) for key, t in times.items()}
    return result
