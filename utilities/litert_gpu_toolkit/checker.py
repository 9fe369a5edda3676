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

import json
import math
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .lint import lint_for_mobile, phone_risk_line
from . import symptoms as symptom_table
from .inputs import InputError, make_inputs, model_signatures, split_by_signature
from .metrics import Comparison, compare
from .model_info import InvalidModelError, ModelInfo, read_model_info
from .recipe import residency
from .ops import REDUCTION_OPS
from .runtime import (STATUS_CRASH, STATUS_KILLED, STATUS_NO_GPU, STATUS_OPS_REJECTED, STATUS_TIMEOUT, RunResult,
                      compile_and_run)

PASS, FALLBACK, COMPILE_FAIL, NUMERICS_FAIL, NO_GPU, INVALID_MODEL = (
    "PASS", "FALLBACK", "COMPILE_FAIL", "NUMERICS_FAIL", "NO_GPU", "INVALID_MODEL")
VERDICTS = (PASS, FALLBACK, COMPILE_FAIL, NUMERICS_FAIL, NO_GPU, INVALID_MODEL)
EXIT_CODES = {PASS: 0, FALLBACK: 1, COMPILE_FAIL: 1, NUMERICS_FAIL: 1, INVALID_MODEL: 2, NO_GPU: 3}
PRECISIONS = ("fp16", "fp32")
_LOG_NOISE = ("RegisterAccelerator", "DestroyAccelerator", "compiler_plugin", "_registry.cc", "Creating LiteRT "
              "environment", "Adding options to the existing", "libLiteRtCompilerPlugin", "Logging before InitGoogle",
              "All log messages before absl", "artificially reduced from", "Failed to load OpenCL",
              "# of threads to", "WebGPU environment (use_low_power", "Created a WebGPU environment",
              "Created LiteRT GpuEnvironment", "initialized directly from incoming")


@dataclass
class Tolerance:
    """When is a GPU output close enough to its reference? Finite and non-zero always; then these."""
    min_corr: float | None = 0.999   # Pearson correlation floor (None: not used)
    rtol: float | None = None        # with atol: np.allclose(out, ref, rtol, atol) must hold
    atol: float | None = None

    def describe(self) -> str:
        parts = ["finite where the reference is", "not all-zero"]
        if self.min_corr is not None:
            parts.append(f"corr >= {self.min_corr:g}")
        if self.rtol is not None or self.atol is not None:
            parts.append(f"allclose(rtol={self.rtol or 0:g}, atol={self.atol or 0:g})")
        return ", ".join(parts)


@dataclass
class Report:
    """Everything a check found. `to_dict()` is the JSON form; `outputs` (arrays) stays out of it."""
    model: str
    verdict: str
    summary: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    static: dict = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)
    unsupported_ops: list[dict] = field(default_factory=list)   # [{op, reason, in_graph}]
    residency: dict | None = None                               # recipe.Residency fields (+ line)
    signatures: dict = field(default_factory=dict)              # sig -> output -> {shape, dtype, vs_cpu, vs_reference}
    suggestions: list[dict] = field(default_factory=list)       # [{symptom, seen, evidence, rewrites, ...}]
    environment: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)                 # step -> seconds
    runs: dict = field(default_factory=dict)                    # label -> status, compile_s, run_s, error, ...
    tolerance: dict = field(default_factory=dict)
    phone_risks: list[dict] = field(default_factory=list)      # lint.lint_for_mobile findings
    phone_risk: str | None = None                               # "passes here; phone risks: ..." on a PASS
    log_tail: str = ""
    outputs: dict = field(default_factory=dict, repr=False)     # label -> sig -> name -> array (not serialised)

    @property
    def ok(self) -> bool:
        return self.verdict == PASS

    @property
    def suggested_rewrites(self) -> list[str]:
        seen: list[str] = []
        for s in self.suggestions:
            seen += [r for r in s.get("rewrites", []) if r not in seen]
        return seen

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("outputs")
        return _json_safe(d)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# ---------------------------------------------------------------------------------------------- steps

def _static(info: ModelInfo) -> dict:
    constants = info.constants_by_size()
    return {
        "size_bytes": info.size_bytes,
        "num_ops": info.num_ops,
        "subgraphs": len(info.tensors),
        "op_histogram": info.op_histogram(),
        "high_rank_tensors": [
            {"tensor": t.name, "shape": list(t.shape), "rank": t.rank, "subgraph": op.subgraph if op else 0,
             "producer": op.op if op else None, "producer_index": op.index if op else None}
            for t, op in info.high_rank_tensors()],
        "constants": {"count": len(constants), "total_bytes": info.constant_bytes,
                      "largest": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "bytes": t.nbytes}
                                  for t in constants[:5]]},
        "has_signature_defs": bool(info.signatures),
        "signatures": [
            {"key": s.key,
             "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype,
                         "shape_signature": list(t.shape_signature) if t.is_dynamic else None}
                        for n, t in s.inputs.items()],
             "outputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype} for n, t in s.outputs.items()]}
            for s in model_signatures(info)],
    }


def _run_entry(run: RunResult) -> dict:
    return {"status": run.status, "accelerator": run.accelerator, "enforce_f32": run.enforce_f32,
            "compile_s": run.compile_s, "run_s": dict(run.run_s), "wall_s": run.wall_s,
            "fully_accelerated": run.fully_accelerated, "error": run.error, "returncode": run.returncode,
            "stage": run.stage}


_LOCATION = re.compile(r"^(\w+Error: )?(CompiledModel error: code=\d+, message=)?(ERROR: )?(\[[^\]]*\]\s*)?")


def error_brief(run: RunResult) -> str:
    """The runtime's error in one line: exception text without source locations, plus the log's ERROR lines."""
    parts: list[str] = []
    for line in (run.error or "").splitlines():
        line = _LOCATION.sub("", line.strip().lstrip("\u2514").strip()).strip()
        if line and line not in parts:
            parts.append(line)
    logged = [_LOCATION.sub("", ln.strip()).strip() for ln in run.log.splitlines() if ln.strip().startswith("ERROR:")]
    logged = [ln for ln in logged if ln and ln not in parts and "not supported by GPU delegate" not in ln]
    text = "; ".join(parts) or run.status
    if logged:
        text += " (log: " + "; ".join(dict.fromkeys(logged[-3:])) + ")"
    return text


def interesting_tail(log: str, lines: int = 15) -> str:
    """The last `lines` lines of a native log without the accelerator-registry chatter."""
    kept = [ln for ln in log.strip().splitlines() if ln.strip() and not any(n in ln for n in _LOG_NOISE)]
    return "\n".join(kept[-lines:])


def _judge(cmp: Comparison, out: np.ndarray, ref: np.ndarray, tol: Tolerance) -> str | None:
    """None when `out` is within tolerance of `ref`, else the symptom: nonfinite / all_zero / degraded."""
    ref_nonfinite = int(np.size(ref) - np.count_nonzero(np.isfinite(np.asarray(ref, dtype=np.float64))))
    if cmp.nonfinite > ref_nonfinite:
        return "nonfinite"
    if cmp.all_zero:
        return "all_zero"
    o = np.asarray(out, dtype=np.float64).reshape(np.shape(ref))
    r = np.asarray(ref, dtype=np.float64)
    if tol.rtol is not None or tol.atol is not None:
        if not np.allclose(o, r, rtol=tol.rtol or 0.0, atol=tol.atol or 0.0, equal_nan=True):
            return "degraded"
    if tol.min_corr is not None:
        if math.isfinite(cmp.corr):
            if cmp.corr < tol.min_corr:
                return "degraded"
        else:  # constant tensor or a single value: no correlation to speak of, use a relative test
            scale = float(np.nanmax(np.abs(r[np.isfinite(r)]))) if np.isfinite(r).any() else 1.0
            if not np.allclose(o, r, rtol=1e-2, atol=1e-3 * max(scale, 1.0), equal_nan=True):
                return "degraded"
    return None


def _compare_entry(out, ref, tol: Tolerance) -> dict:
    try:
        cmp = compare(out, ref)
    except ValueError as exc:
        return {"error": str(exc), "within_tolerance": False, "symptom": "degraded"}
    symptom = _judge(cmp, out, ref, tol)
    return {**cmp.to_dict(), "within_tolerance": symptom is None, "symptom": symptom}


def _environment(runs: dict[str, RunResult]) -> dict:
    from . import __version__
    from .recipe import runtime_version

    env = {"ai_edge_litert": runtime_version(), "toolkit": __version__, "python": platform.python_version(),
           "platform": f"{platform.system()} {platform.machine()}", "gpu_backend": None, "gpu_adapter": None,
           "gpu_adapter_type": None, "software_gpu": None, "gpu_note": None}
    for run in runs.values():
        if run.accelerator != "cpu" and run.gpu.adapter:
            env.update(gpu_backend=run.gpu.backend, gpu_adapter=run.gpu.adapter,
                       gpu_adapter_type=run.gpu.adapter_type, software_gpu=run.gpu.is_software)
            if run.gpu.is_software:
                env["gpu_note"] = (f"{run.gpu.adapter.split(' (')[0]} is a software GPU (Mesa's CPU Vulkan): "
                                   "a proxy for a phone GPU, not one; phones accept and round differently")
            break
    return env


def _suggest_for_rejections(info: ModelInfo, rejected: list[dict]) -> list[dict]:
    entries: dict[str, dict] = {}
    for r in rejected:
        text = f"{r['op']}: {r['reason']}"
        found = symptom_table.for_op(r["op"]) + [s for s in symptom_table.for_log(text)
                                                 if s not in symptom_table.for_op(r["op"])]
        if not found:
            entries.setdefault(f"op:{r['op']}", {"symptom": None, "seen": f"{r['op']} rejected by the GPU delegate",
                                                 "cause": "not in the toolkit's symptom table yet",
                                                 "evidence": [], "rewrites": []})["evidence"].append(text)
        for s in found:
            e = entries.setdefault(s.id, {"symptom": s.id, "seen": s.seen, "cause": s.cause, "evidence": [],
                                          "rewrites": list(s.rewrites), "upstream": s.upstream})
            if text not in e["evidence"]:
                e["evidence"].append(text)
    if "rank_gt_4" in entries:
        for t, op in info.high_rank_tensors():
            where = f"{op.op} #{op.index}" if op else "a graph input / constant"
            entries["rank_gt_4"]["evidence"].append(f"rank-{t.rank} tensor {t.name!r} {list(t.shape)} from {where}")
    return list(entries.values())


def _suggest_for_numerics(info: ModelInfo, failures: list[tuple[str, str, str, str]],
                          labels_ok: dict[str, bool]) -> list[dict]:
    """failures: (label, signature, output, symptom) for each GPU comparison outside tolerance."""
    hist = info.op_histogram()
    reductions = ", ".join(f"{op} x{hist[op]}" for op in REDUCTION_OPS if op in hist)
    out: list[dict] = []
    for kind in ("nonfinite", "all_zero", "degraded"):
        hits = [(label, sig, name) for label, sig, name, k in failures if k == kind]
        if not hits:
            continue
        evidence = [f"{sig}/{name} on {label}: {kind.replace('_', '-')}" for label, sig, name in hits]
        fp16_only = all(lbl.startswith("gpu_fp16") for lbl, _, _ in hits) and any(
            lbl.startswith("gpu_fp32") and ok for lbl, ok in labels_ok.items())
        if fp16_only:
            evidence.append("the fp32 GPU run (enforce_f32) is within tolerance: an fp16 range/precision problem")
        elif any(lbl.startswith("gpu_fp32") for lbl, _, _ in hits):
            evidence.append("fp32 on the GPU fails too: not only fp16 -- bisect to the first diverging tensor")
        if reductions:
            evidence.append(f"candidate reductions in the graph: {reductions}")
        for s in symptom_table.for_numeric(kind):
            out.append({"symptom": s.id, "seen": s.seen, "cause": s.cause, "evidence": evidence,
                        "rewrites": list(s.rewrites), "upstream": s.upstream})
    return out


class _Verdict(Exception):
    """Raised by a step that has reached the verdict: (verdict, summary)."""

    def __init__(self, verdict: str, summary: str):
        super().__init__(summary)
        self.verdict, self.summary = verdict, summary


@dataclass
class _Context:
    """What the steps of one check share: the report being filled, the runs so far, the clock."""
    model: str | os.PathLike | bytes
    label: str
    report: Report
    tol: Tolerance
    precisions: tuple[str, ...]
    timeout: float
    t_start: float
    runs: dict[str, RunResult] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    findings: list = field(default_factory=list)

    def run(self, label: str, accelerator: str, feeds, enforce_f32: bool = False) -> RunResult:
        r = compile_and_run(self.model, feeds, accelerator=accelerator, enforce_f32=enforce_f32, timeout=self.timeout)
        self.runs[label] = r
        self.timings[label] = r.wall_s
        return r

    def finish(self, verdict: str, summary: str) -> Report:
        report = self.report
        report.verdict, report.summary = verdict, summary
        if verdict == PASS and self.findings:
            report.phone_risk = phone_risk_line(self.findings)
        report.environment = _environment(self.runs)
        report.runs = {label: _run_entry(r) for label, r in self.runs.items()}
        report.outputs = {label: r.outputs for label, r in self.runs.items() if r.outputs}
        self.timings["total"] = time.perf_counter() - self.t_start
        report.timings = {k: round(v, 4) for k, v in self.timings.items()}
        return report


@dataclass
class PreparedInputs:
    """Step 2's result: the arrays to feed and the caller's reference outputs, per signature."""
    feeds: dict[str, dict[str, np.ndarray]]
    signatures: list
    references: dict[str, dict[str, np.ndarray]]


@dataclass
class GpuRuns:
    """Step 4's result: the strict GPU-only run and the labels of every GPU run that produced outputs."""
    strict: RunResult
    labels: list[str]                    # e.g. ["gpu_fp16", "gpu_fp32"] or ["gpu_fp16+cpu", ...]

    @property
    def fell_back(self) -> bool:
        """The strict compile rejected ops, and a GPU+CPU compile ran instead."""
        return self.strict.status == STATUS_OPS_REJECTED and bool(self.labels)


@dataclass
class NumericFailure:
    """One GPU output outside tolerance: run label, signature, output name, symptom."""
    label: str
    signature: str
    output: str
    symptom: str                         # "nonfinite" | "all_zero" | "degraded"

    def as_tuple(self) -> tuple[str, str, str, str]:
        return (self.label, self.signature, self.output, self.symptom)


@dataclass
class Numerics:
    """Step 5's result."""
    failures: list[NumericFailure] = field(default_factory=list)
    labels_ok: dict[str, bool] = field(default_factory=dict)
    suspected_fallback: list[str] = field(default_factory=list)   # "sig/name" bit-identical to the CPU
    cpu_mismatches: list[str] = field(default_factory=list)       # problems: the CPU already differs from reference

    @property
    def wrong(self) -> bool:
        return bool(self.failures or self.cpu_mismatches)

    def kinds(self) -> list[str]:
        return sorted({f.symptom for f in self.failures})


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
    shapes / int_ranges: per input name, for dynamic dims (default 1) and integer value ranges
    min_corr / rtol / atol: the tolerance (see `Tolerance`); precisions: GPU precisions to run
    timeout:   seconds allowed per compile+run child process
    Raises `InputError` (a ValueError) only when the caller's arrays / shapes / ranges / settings do not fit
    the model or make no sense (min_corr outside (0, 1], a negative tolerance, timeout <= 0, seed < 0).
    """
    validate_settings(min_corr=min_corr, rtol=rtol, atol=atol, timeout=timeout, seed=seed)
    precisions = tuple(p for p in PRECISIONS if p in precisions) or ("fp16",)
    tol = Tolerance(min_corr=min_corr, rtol=rtol, atol=atol)
    label = "<bytes>" if isinstance(model, (bytes, bytearray)) else str(model)
    report = Report(model=label, verdict=INVALID_MODEL, summary="", tolerance={**asdict(tol), "text": tol.describe()})
    ctx = _Context(model, label, report, tol, precisions, timeout, time.perf_counter())
    try:
        info = _step_static(ctx)
        prepared = _step_inputs(ctx, info, inputs, reference, seed, shapes, int_ranges)
        cpu = _step_cpu_reference(ctx, prepared)
        gpu = _step_gpu(ctx, info, prepared)
        numerics = _step_numerics(ctx, prepared, cpu, gpu)
        verdict, summary = _step_verdict(ctx, info, gpu, numerics)
    except _Verdict as v:
        verdict, summary = v.verdict, v.summary
    return ctx.finish(verdict, summary)


def validate_settings(*, min_corr=None, rtol=None, atol=None, timeout=None, seed=None) -> None:
    """Raise `InputError` for check settings that make no sense (the CLI refuses them the same way)."""
    if min_corr is not None and not (isinstance(min_corr, (int, float)) and 0 < min_corr <= 1):
        raise InputError(f"min_corr must be in (0, 1], got {min_corr!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise InputError(f"{name} must be a finite number >= 0, got {value!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise InputError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    if seed is not None and not (isinstance(seed, (int, np.integer)) and seed >= 0):
        raise InputError(f"seed must be an integer >= 0, got {seed!r}")


def _step_static(ctx: _Context) -> ModelInfo:
    """1. Read the flatbuffer (no runtime): ops, tensors, signatures, the mobile lint."""
    report = ctx.report
    t0 = time.perf_counter()
    try:
        info = read_model_info(ctx.model)
    except InvalidModelError as exc:
        ctx.timings["static"] = time.perf_counter() - t0
        report.problems.append(str(exc))
        raise _Verdict(INVALID_MODEL, str(exc)) from None
    ctx.timings["static"] = time.perf_counter() - t0
    report.static = _static(info)
    try:
        ctx.findings = lint_for_mobile(info)
    except (IndexError, KeyError, ValueError) as exc:  # a graph too broken to walk; the runtime will say more
        report.warnings.append(f"mobile lint skipped: the graph cannot be walked ({type(exc).__name__}: {exc})")
    report.phone_risks = [f.to_dict() for f in ctx.findings]
    if not info.num_ops:
        report.problems.append("the model has no operators")
        raise _Verdict(INVALID_MODEL, f"{ctx.label}: the model has no operators")
    if not info.signatures:
        report.warnings.append("the model has no signature defs; checking graph 0 through the runtime's "
                               "placeholder signature (inputs and outputs named by tensor name)")
    big = report.static["high_rank_tensors"]
    if big:
        report.warnings.append(f"{len(big)} tensor(s) above rank 4 (the GPU handles rank <= 4): "
                               + ", ".join(f"{b['tensor']} {b['shape']}" for b in big[:5]))
    return info


def _step_inputs(ctx: _Context, info: ModelInfo, inputs, reference, seed, shapes, int_ranges) -> PreparedInputs:
    """2. The arrays to feed; the caller's mistakes raise InputError (they are not the model's fault)."""
    t0 = time.perf_counter()
    feeds, specs, input_warnings = make_inputs(info, inputs, seed=seed, shapes=shapes, int_ranges=int_ranges)
    sigs = model_signatures(info)
    refs = split_by_signature(reference, {s.key: list(s.outputs) for s in sigs}, "output")
    for s in sigs:
        for name, arr in refs.get(s.key, {}).items():
            t = s.outputs[name]
            if t.is_dynamic:
                continue
            if np.size(arr) != int(np.prod(t.shape)):
                raise InputError(f"reference for {s.key}/{name} has shape {list(np.shape(arr))}; "
                                 f"the output is {list(t.shape)}")
            if [d for d in np.shape(arr) if d != 1] != [d for d in t.shape if d != 1]:
                raise InputError(f"reference for {s.key}/{name} has shape {list(np.shape(arr))}: the right size "
                                 f"but not the output's shape {list(t.shape)} (only size-1 axes may differ)")
    ctx.report.inputs = [s.to_dict() for s in specs]
    ctx.report.warnings += input_warnings
    ctx.timings["inputs"] = time.perf_counter() - t0
    return PreparedInputs(feeds, sigs, refs)


def _step_cpu_reference(ctx: _Context, prepared: PreparedInputs) -> RunResult:
    """3. CPU compile + run: the fp32 reference, and proof that LiteRT can run the file at all."""
    report = ctx.report
    cpu = ctx.run("cpu", "cpu", prepared.feeds)
    if cpu.status == STATUS_KILLED:
        report.log_tail = interesting_tail(cpu.log)
        report.problems.append(f"the CPU runtime process: {cpu.error}")
        raise _Verdict(COMPILE_FAIL, f"the CPU reference run did not finish: {cpu.error}; rerun with more memory")
    if not cpu.ok:
        report.log_tail = interesting_tail(cpu.log)
        what = {STATUS_CRASH: "the CPU runtime crashed", STATUS_TIMEOUT: "the CPU runtime hung"}.get(
            cpu.status, "LiteRT could not compile or run the model on the CPU")
        report.problems.append(f"{what} ({cpu.status}): {error_brief(cpu)}")
        raise _Verdict(INVALID_MODEL, f"{what} ({cpu.status}): {error_brief(cpu)}")
    for sig, outs in cpu.outputs.items():
        for name, arr in outs.items():
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(np.asarray(arr, dtype=np.float64))))
            if bad:
                report.warnings.append(f"{sig}/{name}: the CPU reference itself has {bad} non-finite value(s) "
                                       "(the model or the inputs, not the GPU)")
    return cpu


def _step_gpu(ctx: _Context, info: ModelInfo, prepared: PreparedInputs) -> GpuRuns:
    """4. Strict GPU-only compile + run per precision; a GPU+CPU fallback only when the strict compile fails."""
    report, precisions = ctx.report, ctx.precisions
    strict = ctx.run(f"gpu_{precisions[0]}", "gpu", prepared.feeds, enforce_f32=precisions[0] == "fp32")
    if strict.status == STATUS_NO_GPU:
        report.log_tail = interesting_tail(strict.log)
        report.problems.append(f"no GPU adapter / GPU backend: {strict.gpu.no_gpu_reason}")
        raise _Verdict(NO_GPU, f"no usable GPU: {strict.gpu.no_gpu_reason}")
    labels: list[str] = []
    if strict.ok:
        labels.append(f"gpu_{precisions[0]}")
        report.residency = residency(info, strict).to_dict()
        for p in precisions[1:]:
            r = ctx.run(f"gpu_{p}", "gpu", prepared.feeds, enforce_f32=p == "fp32")
            if r.ok:
                labels.append(f"gpu_{p}")
            else:
                report.warnings.append(f"strict GPU {p} compile/run failed ({r.status}) although {precisions[0]} "
                                       f"passed: {error_brief(r)}")
    else:
        report.log_tail = interesting_tail(strict.log)
        if strict.status not in (STATUS_TIMEOUT, STATUS_KILLED):  # a hang would only hang again
            for p in precisions:
                r = ctx.run(f"gpu_{p}+cpu", "gpu+cpu", prepared.feeds, enforce_f32=p == "fp32")
                if r.ok:
                    labels.append(f"gpu_{p}+cpu")
        fallback_run = next((ctx.runs[lbl] for lbl in labels), None)
        report.residency = residency(info, fallback_run or strict).to_dict()
    rejected_from = strict if strict.gpu.rejected else next(
        (ctx.runs[lbl] for lbl in labels if ctx.runs[lbl].gpu.rejected), strict)
    hist = info.op_histogram()
    report.unsupported_ops = [{"op": r.op, "reason": r.reason, "in_graph": hist.get(r.op, 0)}
                              for r in rejected_from.gpu.rejected]
    return GpuRuns(strict, labels)


def _looks_like_cpu_fallback(label: str, cmp_entry: dict, ref: np.ndarray) -> bool:
    """A strict fp16 GPU output bit-identical to CPU fp32 suggests the CPU ran it -- unless identity is expected:
    fewer than two distinct finite values (all inf / nan, constant, all zero), or integer-valued outputs."""
    if not (label == "gpu_fp16" and cmp_entry.get("bit_identical") and np.issubdtype(ref.dtype, np.floating)
            and np.size(ref) > 1):
        return False
    r = np.asarray(ref, dtype=np.float64)
    finite = r[np.isfinite(r)]
    if np.unique(finite[:4096]).size < 2:
        return False
    return not bool(np.all(finite == np.round(finite)))


def _step_numerics(ctx: _Context, prepared: PreparedInputs, cpu: RunResult, gpu: GpuRuns) -> Numerics:
    """5. Every GPU run against the CPU fp32 reference, and every run against the caller's reference."""
    report, runs, tol = ctx.report, ctx.runs, ctx.tol
    t0 = time.perf_counter()
    num = Numerics(labels_ok={lbl: True for lbl in gpu.labels})
    for s in prepared.signatures:
        outs = report.signatures.setdefault(s.key, {})
        for name in s.outputs:
            ref_cpu = cpu.outputs.get(s.key, {}).get(name)
            if ref_cpu is None:
                continue
            entry = outs.setdefault(name, {"shape": list(np.shape(ref_cpu)), "dtype": str(ref_cpu.dtype),
                                           "vs_cpu": {}, "vs_reference": {}})
            for lbl in gpu.labels:
                got = runs[lbl].outputs.get(s.key, {}).get(name)
                if got is None:
                    continue
                c = _compare_entry(got, ref_cpu, tol)
                c["suspected_cpu_fallback"] = _looks_like_cpu_fallback(lbl, c, ref_cpu)
                entry["vs_cpu"][lbl] = c
                if c["suspected_cpu_fallback"]:
                    num.suspected_fallback.append(f"{s.key}/{name}")
                if not c["within_tolerance"]:
                    num.failures.append(NumericFailure(lbl, s.key, name, c["symptom"]))
                    num.labels_ok[lbl] = False
            ref = prepared.references.get(s.key, {}).get(name)
            if ref is None:
                continue
            for lbl in ["cpu", *gpu.labels]:
                got = runs[lbl].outputs.get(s.key, {}).get(name)
                if got is None:
                    continue
                c = _compare_entry(got, ref, tol)
                if "error" in c:  # the caller's array does not have the output's shape
                    raise InputError(f"reference for {s.key}/{name}: {c['error']}")
                entry["vs_reference"][lbl] = c
                if c["within_tolerance"]:
                    continue
                if lbl == "cpu":
                    problem = (f"{s.key}/{name}: the CPU result already differs from the reference "
                               f"({c['symptom']}, corr {c.get('corr')}): the conversion changed the numbers, "
                               "not the GPU")
                    report.problems.append(problem)
                    num.cpu_mismatches.append(problem)
                else:
                    num.failures.append(NumericFailure(f"{lbl} vs reference", s.key, name, c["symptom"]))
    if num.suspected_fallback:
        report.warnings.append("suspected silent CPU fallback: the GPU fp16 output is bit-identical to CPU fp32 "
                               f"for {', '.join(num.suspected_fallback)} (real fp16 execution drifts in the last "
                               "digits)")
    ctx.timings["compare"] = time.perf_counter() - t0
    if num.cpu_mismatches:
        report.suggestions.append({"symptom": "conversion_mismatch",
                                   "seen": "the converted graph on CPU differs from the source model",
                                   "cause": "the conversion (or a rewrite) changed the math; the GPU is not involved",
                                   "evidence": list(num.cpu_mismatches), "rewrites": ["bisect"], "upstream": None})
    for f in num.failures:
        report.problems.append(f"{f.signature}/{f.output} on {f.label}: outside tolerance "
                               f"({f.symptom.replace('_', '-')})")
    return num


def _step_verdict(ctx: _Context, info: ModelInfo, gpu: GpuRuns, num: Numerics) -> tuple[str, str]:
    """6. Verdict, summary and the suggested rewrites."""
    report, runs, strict = ctx.report, ctx.runs, gpu.strict
    if report.unsupported_ops:
        report.suggestions = _suggest_for_rejections(info, report.unsupported_ops) + report.suggestions
    if num.failures:
        report.suggestions += _suggest_for_numerics(info, [f.as_tuple() for f in num.failures], num.labels_ok)
    if not strict.ok:
        how = {STATUS_CRASH: "the GPU runtime crashed", STATUS_TIMEOUT: "the GPU runtime hung",
               STATUS_KILLED: "the GPU run did not finish"}.get(strict.status)
        if how:
            detail = f"{how}: {strict.error}"
        elif strict.status == STATUS_OPS_REJECTED:
            op_types = list(dict.fromkeys(r["op"] for r in report.unsupported_ops))
            detail = f"strict GPU compile rejected {len(op_types)} op type(s): {', '.join(op_types)}"
        else:
            detail = f"strict GPU compile/run failed ({strict.status}): {error_brief(strict)}"
        report.problems.insert(0, detail)
        if not gpu.labels and strict.status == STATUS_OPS_REJECTED:
            report.problems.append("the GPU+CPU fallback compile failed too: "
                                   + "; ".join(f"{lbl}: {error_brief(r)}" for lbl, r in runs.items() if "+cpu" in lbl))
        verdict = FALLBACK if gpu.fell_back else COMPILE_FAIL
        summary = f"{detail}; {report.residency['line']}" if report.residency else detail
        if num.wrong:
            summary += "; numbers also wrong: " + ", ".join(num.kinds() or ["conversion"])
        return verdict, summary
    if num.wrong:
        kinds = num.kinds() or ["conversion mismatch"]
        return NUMERICS_FAIL, (f"{report.residency['line']}, but the numbers are wrong: "
                               + ", ".join(k.replace("_", "-") for k in kinds))
    worst = min((c.get("corr") for o in report.signatures.values() for e in o.values()
                 for c in e["vs_cpu"].values() if c.get("corr") is not None), default=None)
    corr_text = f"; min corr vs CPU {worst:.6f}" if worst is not None else ""
    return PASS, f"{report.residency['line']}; outputs within tolerance{corr_text}"
