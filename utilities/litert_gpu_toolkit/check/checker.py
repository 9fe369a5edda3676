"""Check a .tflite on the GPU: does every op run there (strict GPU-only compile), and are the numbers right?

    from litert_gpu_toolkit import check_gpu_compatibility, print_report
    print_report(check_gpu_compatibility("model.tflite"))

Steps, each timed in the report:
  static    read the flatbuffer (no TensorFlow): ops, tensors above rank 4, signatures, constants;
  inputs    seeded random inputs that stay in range (integer ids bounded by the table they index),
            or the caller's arrays / .npz;
  cpu       LiteRT CPU compile + run: the fp32 reference, and proof the file runs at all;
  gpu_fp16  strict GPU-only compile + run at the GPU's default precision (what a phone uses);
  gpu_fp32  strict GPU-only compile + run with enforce_f32 (tells fp16 range trouble from wrong kernels);
  fallback  only when the strict compile fails: a GPU+CPU compile + run per precision
            (labels gpu_fp16+cpu, gpu_fp32+cpu), so the numbers are checked even without residency.
Every compile runs in a child process: a native crash or hang becomes part of the report.

Verdicts: PASS (strict GPU compile, numbers within tolerance), FALLBACK (runs only with CPU fallback),
COMPILE_FAIL (the GPU compile or run failed, crashed or hung), NUMERICS_FAIL (symptom: nonfinite,
all_zero or degraded), NO_GPU (no adapter / GPU backend), INVALID_MODEL (not a runnable LiteRT model).

Tolerance (GPU vs the CPU fp32 reference, and vs `reference` when given): by default every output
must be finite where the CPU is, not all-zero, and correlate >= 0.999 (an fp16 GPU drifts ~1e-3
relative on healthy models); `rtol`/`atol` add an elementwise np.allclose test.

The `check` command (`cli.py`) exits by verdict; the exit statuses of every command are listed once,
in `cli.EXIT_STATUS`.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict

import numpy as np

from ..core.arguments import MIN_TIMEOUT_S
from ..core.inputs import InputError
from .steps import (
    _Context,
    _Verdict,
    _step_cpu_reference,
    _step_gpu,
    _step_inputs,
    _step_numerics,
    _step_static,
    _step_verdict,
)
from .verdicts import COMPILE_FAIL, EXIT_CODES, FALLBACK, NO_GPU, NUMERICS_FAIL, PASS, VERDICTS  # noqa: F401
from .verdicts import INVALID_MODEL, PRECISIONS, Report, Tolerance


def check_gpu_compatibility(
    model: str | os.PathLike | bytes,
    *,
    inputs=None,
    reference=None,
    seed: int = 0,
    shapes: dict | None = None,
    int_ranges: dict | None = None,
    min_corr: float | None = 0.999,
    rtol: float | None = None,
    atol: float | None = None,
    precisions: tuple[str, ...] = PRECISIONS,
    timeout: float = 600.0,
) -> Report:
    """Check `model` (.tflite path or bytes) for GPU residency and numerics; never raises for a bad model or runtime.

    inputs:    {name: array}, {"sig/name": array}, {sig: {name: array}} or an .npz path (default: seeded random)
    reference: the source model's outputs, same forms with output names; GPU and CPU are compared to them
    shapes / int_ranges: per input name, for dynamic dims (default 1; when the CPU cannot run a guessed 1,
               one retry with every non-leading guessed dim at DYNAMIC_RETRY_DIM) and integer value ranges
    min_corr / rtol / atol: the tolerance (see `Tolerance`); precisions: GPU precisions to run
    timeout:   seconds allowed per compile+run child process
    Raises `InputError` (a ValueError) only when the caller's arrays / shapes / ranges / settings do not fit
    the model or make no sense (min_corr outside (0, 1], a negative tolerance, timeout < MIN_TIMEOUT_S
    (10 s), seed < 0), or when an input array has another dtype than the signature's or a NaN, or a
    reference output has a NaN or no finite value. `check_under_runtime` runs the same check under another
    ai-edge-litert version.
    """
    return check_under_runtime(None, model, inputs=inputs, reference=reference, seed=seed, shapes=shapes,
                               int_ranges=int_ranges, min_corr=min_corr, rtol=rtol, atol=atol,
                               precisions=precisions, timeout=timeout)


def check_under_runtime(runtime: str | None, model: str | os.PathLike | bytes, **settings) -> Report:
    """`check_gpu_compatibility(model, **settings)` with every compile under ai-edge-litert `runtime` (a side
    environment made once and kept, `runtime.versions`; None: LITERT_GPU_RUNTIME when set, else the installed
    one). A runtime whose Python API cannot ask for fp32 is checked at its default precision only (a warning
    says so).
    Raises `RuntimeVersionError` (a ValueError) when the version cannot be installed or has no GPU accelerator."""
    known = check_gpu_compatibility.__kwdefaults__
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise TypeError(f"unknown check settings: {', '.join(unknown)}")
    opts = {**known, **settings}
    inputs, reference, seed, shapes = opts["inputs"], opts["reference"], opts["seed"], opts["shapes"]
    min_corr, rtol, atol, timeout = opts["min_corr"], opts["rtol"], opts["atol"], opts["timeout"]
    validate_settings(min_corr=min_corr, rtol=rtol, atol=atol, timeout=timeout, seed=seed)
    from ..runtime.versions import chosen, prepare

    runtime = prepare(chosen(runtime))            # made now: a version that cannot be used is the caller's error
    precisions = tuple(p for p in PRECISIONS if p in opts["precisions"]) or ("fp16",)
    no_fp32 = runtime is not None and "fp32" in precisions and not _side_has_fp32(runtime)
    if no_fp32:
        precisions = tuple(p for p in precisions if p != "fp32")
    tol = Tolerance(min_corr=min_corr, rtol=rtol, atol=atol)
    label = "<bytes>" if isinstance(model, (bytes, bytearray)) else str(model)
    once = (model, label, tol, precisions, timeout, inputs, reference, seed, opts["int_ranges"], runtime)
    report, info = _check_once(*once, shapes)
    if no_fp32:
        report.warnings.append(f"fp32 GPU run skipped: ai-edge-litert {runtime}'s Python API cannot ask the GPU for "
                               "fp32 (no GpuOptions / enforce_f32), so only its default precision was checked")
    guessed = _guessed_dynamic_inputs(info, inputs, shapes) if report.verdict == INVALID_MODEL else {}
    if not guessed or not any(p.startswith(CPU_RUN_FAILED) for p in report.problems):
        return report
    # A dynamic length of 1 is below what many graphs can run (an STFT or a strided conv stem needs a window's
    # worth of samples): LiteRT's CPU refuses to prepare them. One retry at a longer guess before giving up.
    retry_shapes = {**(shapes or {}), **guessed}
    retried, _ = _check_once(*once, retry_shapes)
    names = ", ".join(f"{key} {list(shape)}" for key, shape in guessed.items())
    if retried.verdict != INVALID_MODEL:
        retried.warnings.insert(0, f"the dynamic dimensions set to 1 could not run on the CPU ({report.summary}); "
                                   f"checked at {names} instead: pass the real shape with --shape NAME=... "
                                   "(shapes={...})")
        return retried
    report.problems.append(f"the dynamic dimensions were guessed (1, then {DYNAMIC_RETRY_DIM}) and neither "
                           "runs: pass the model's real input shape with --shape NAME=... (shapes={...})")
    report.summary += f"; pass the real input shape with --shape (dynamic dimensions guessed as 1, then " \
                      f"{DYNAMIC_RETRY_DIM})"
    return report


def _side_has_fp32(runtime: str) -> bool:
    from ..runtime.versions import side_runtime

    return side_runtime(runtime).enforce_f32


DYNAMIC_RETRY_DIM = 1024      # the second guess for a dynamic non-leading dimension (a leading one stays 1: batch)
CPU_RUN_FAILED = "LiteRT could not compile or run the model on the CPU"


def _check_once(model, label, tol, precisions, timeout, inputs, reference, seed, int_ranges, runtime, shapes):
    report = Report(model=label, verdict=INVALID_MODEL, summary="", tolerance={**asdict(tol), "text": tol.describe()})
    ctx = _Context(model, label, report, tol, precisions, timeout, time.perf_counter(), runtime=runtime)
    info = None
    try:
        info = _step_static(ctx)
        prepared = _step_inputs(ctx, info, inputs, reference, seed, shapes, int_ranges)
        cpu = _step_cpu_reference(ctx, prepared)
        gpu = _step_gpu(ctx, info, prepared)
        numerics = _step_numerics(ctx, prepared, cpu, gpu)
        verdict, summary = _step_verdict(ctx, info, gpu, numerics)
    except _Verdict as v:
        verdict, summary = v.verdict, v.summary
    return ctx.finish(verdict, summary), info


def _guessed_dynamic_inputs(info, inputs, shapes) -> dict:
    """{"sig/name": retry shape} for every dynamic input whose shape the checker chose itself (no caller arrays,
    no shape for it): each dynamic dimension but a leading one becomes DYNAMIC_RETRY_DIM."""
    if info is None or inputs is not None:
        return {}
    shapes = shapes or {}
    guessed = {}
    for sig in info.signatures:
        for name, t in sig.inputs.items():
            if not t.is_dynamic or f"{sig.key}/{name}" in shapes or name in shapes:
                continue
            dims = tuple(1 if d < 0 and i == 0 else DYNAMIC_RETRY_DIM if d < 0 else int(d)
                         for i, d in enumerate(t.shape_signature))
            if any(d == DYNAMIC_RETRY_DIM and s < 0 for d, s in zip(dims, t.shape_signature)):
                guessed[f"{sig.key}/{name}"] = dims
    return guessed


def validate_settings(*, min_corr=None, rtol=None, atol=None, timeout=None, seed=None) -> None:
    """Raise `InputError` for check settings that make no sense (the CLI refuses them the same way)."""
    if min_corr is not None and not (isinstance(min_corr, (int, float)) and 0 < min_corr <= 1):
        raise InputError(f"min_corr must be in (0, 1], got {min_corr!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise InputError(f"{name} must be a finite number >= 0, got {value!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and math.isfinite(timeout)
                                    and timeout >= MIN_TIMEOUT_S):
        raise InputError(f"timeout must be a finite number of seconds, at least {MIN_TIMEOUT_S:g} (starting a "
                         f"runtime child alone takes seconds), got {timeout!r}")
    if seed is not None and not (isinstance(seed, (int, np.integer)) and seed >= 0):
        raise InputError(f"seed must be an integer >= 0, got {seed!r}")
