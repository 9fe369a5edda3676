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

Exit status of the `check` command: 0 PASS; 1 FALLBACK, COMPILE_FAIL or NUMERICS_FAIL;
2 INVALID_MODEL or unusable arguments / inputs; 3 NO_GPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .lint import lint_for_mobile, phone_risk_line
from . import symptoms as symptom_table
from .inputs import InputError, make_inputs, model_signatures, parse_int_range_args, parse_shape_args, split_by_signature
from .metrics import Comparison, compare
from .model_info import InvalidModelError, ModelInfo, read_model_info
from .recipe import residency
from .runtime import (STATUS_CRASH, STATUS_NO_GPU, STATUS_OPS_REJECTED, STATUS_TIMEOUT, RunResult,
                      compile_and_run)

PASS, FALLBACK, COMPILE_FAIL, NUMERICS_FAIL, NO_GPU, INVALID_MODEL = (
    "PASS", "FALLBACK", "COMPILE_FAIL", "NUMERICS_FAIL", "NO_GPU", "INVALID_MODEL")
VERDICTS = (PASS, FALLBACK, COMPILE_FAIL, NUMERICS_FAIL, NO_GPU, INVALID_MODEL)
EXIT_CODES = {PASS: 0, FALLBACK: 1, COMPILE_FAIL: 1, NUMERICS_FAIL: 1, INVALID_MODEL: 2, NO_GPU: 3}
PRECISIONS = ("fp16", "fp32")
# ops whose fp16 accumulation / intermediate can pass 65504: named when the numbers go wrong
REDUCTION_OPS = ("MEAN", "SUM", "SQUARED_DIFFERENCE", "RSQRT", "SQRT", "POW", "REDUCE_PROD", "L2_NORMALIZATION",
                 "SOFTMAX", "LOG_SOFTMAX", "BATCH_MATMUL", "FULLY_CONNECTED")
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
    reference: the source model's outputs, same forms with output names; GPU and CPU are compared to it
    shapes / int_ranges: per input name, for dynamic dims (default 1) and integer value ranges
    min_corr / rtol / atol: the tolerance (see `Tolerance`); precisions: GPU precisions to run
    timeout:   seconds allowed per compile+run child process
    Raises `InputError` (a ValueError) only when the caller's arrays / shapes / ranges do not fit the model.
    """
    t_start = time.perf_counter()
    precisions = tuple(p for p in PRECISIONS if p in precisions) or ("fp16",)
    tol = Tolerance(min_corr=min_corr, rtol=rtol, atol=atol)
    timings: dict[str, float] = {}
    label = "<bytes>" if isinstance(model, (bytes, bytearray)) else str(model)
    report = Report(model=label, verdict=INVALID_MODEL, summary="",
                    tolerance={**asdict(tol), "text": tol.describe()})
    runs: dict[str, RunResult] = {}
    findings: list = []

    def finish(verdict: str, summary: str) -> Report:
        report.verdict, report.summary = verdict, summary
        if verdict == PASS and findings:
            report.phone_risk = phone_risk_line(findings)
        report.environment = _environment(runs)
        report.runs = {label: _run_entry(r) for label, r in runs.items()}
        report.outputs = {label: r.outputs for label, r in runs.items() if r.outputs}
        timings["total"] = time.perf_counter() - t_start
        report.timings = {k: round(v, 4) for k, v in timings.items()}
        return report

    # 1. static inspection
    t0 = time.perf_counter()
    try:
        info = read_model_info(model)
    except InvalidModelError as exc:
        timings["static"] = time.perf_counter() - t0
        report.problems.append(str(exc))
        return finish(INVALID_MODEL, str(exc))
    timings["static"] = time.perf_counter() - t0
    report.static = _static(info)
    try:
        findings = lint_for_mobile(info)
    except (IndexError, KeyError, ValueError) as exc:  # a graph too broken to walk; the runtime will say more
        report.warnings.append(f"mobile lint skipped: the graph cannot be walked ({type(exc).__name__}: {exc})")
    report.phone_risks = [f.to_dict() for f in findings]
    if not info.num_ops:
        report.problems.append("the model has no operators")
        return finish(INVALID_MODEL, f"{label}: the model has no operators")
    if not info.signatures:
        report.warnings.append("the model has no signature defs; checking graph 0 through the runtime's "
                               "placeholder signature (inputs and outputs named by tensor name)")
    big = report.static["high_rank_tensors"]
    if big:
        report.warnings.append(f"{len(big)} tensor(s) above rank 4 (the GPU handles rank <= 4): "
                               + ", ".join(f"{b['tensor']} {b['shape']}" for b in big[:5]))

    # 2. inputs (the caller's mistakes raise InputError: they are not the model's fault)
    t0 = time.perf_counter()
    feeds, specs, input_warnings = make_inputs(info, inputs, seed=seed, shapes=shapes, int_ranges=int_ranges)
    sigs = model_signatures(info)
    refs = split_by_signature(reference, {s.key: list(s.outputs) for s in sigs}, "output")
    for s in sigs:
        for name, arr in refs.get(s.key, {}).items():
            t = s.outputs[name]
            if not t.is_dynamic and np.size(arr) != int(np.prod(t.shape)):
                raise InputError(f"reference for {s.key}/{name} has shape {list(np.shape(arr))}; "
                                 f"the output is {list(t.shape)}")
    report.inputs = [s.to_dict() for s in specs]
    report.warnings += input_warnings
    timings["inputs"] = time.perf_counter() - t0

    def run(label: str, accelerator: str, enforce_f32: bool = False) -> RunResult:
        r = compile_and_run(model, feeds, accelerator=accelerator, enforce_f32=enforce_f32, timeout=timeout)
        runs[label] = r
        timings[label] = r.wall_s
        return r

    # 3. CPU reference: also proves LiteRT can run the file at all
    cpu = run("cpu", "cpu")
    if not cpu.ok:
        report.log_tail = interesting_tail(cpu.log)
        what = {STATUS_CRASH: "the CPU runtime crashed", STATUS_TIMEOUT: "the CPU runtime hung"}.get(
            cpu.status, "LiteRT could not compile or run the model on the CPU")
        report.problems.append(f"{what} ({cpu.status}): {error_brief(cpu)}")
        return finish(INVALID_MODEL, f"{what} ({cpu.status}): {error_brief(cpu)}")
    for sig, outs in cpu.outputs.items():
        for name, arr in outs.items():
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(np.asarray(arr, dtype=np.float64))))
            if bad:
                report.warnings.append(f"{sig}/{name}: the CPU reference itself has {bad} non-finite value(s) "
                                       "(the model or the inputs, not the GPU)")

    # 4. strict GPU-only compile + run, per precision; fallback only when the strict compile fails
    strict = run(f"gpu_{precisions[0]}", "gpu", enforce_f32=precisions[0] == "fp32")
    if strict.status == STATUS_NO_GPU:
        report.log_tail = interesting_tail(strict.log)
        report.problems.append(f"no GPU adapter / GPU backend: {strict.gpu.no_gpu_reason}")
        return finish(NO_GPU, f"no usable GPU: {strict.gpu.no_gpu_reason}")
    gpu_labels: list[str] = []
    if strict.ok:
        gpu_labels.append(f"gpu_{precisions[0]}")
        report.residency = residency(info, strict).to_dict()
        for p in precisions[1:]:
            r = run(f"gpu_{p}", "gpu", enforce_f32=p == "fp32")
            if r.ok:
                gpu_labels.append(f"gpu_{p}")
            else:
                report.warnings.append(f"strict GPU {p} compile/run failed ({r.status}) although {precisions[0]} "
                                       f"passed: {error_brief(r)}")
    else:
        report.log_tail = interesting_tail(strict.log)
        if strict.status != STATUS_TIMEOUT:  # a hang would only hang again
            for p in precisions:
                r = run(f"gpu_{p}+cpu", "gpu+cpu", enforce_f32=p == "fp32")
                if r.ok:
                    gpu_labels.append(f"gpu_{p}+cpu")
        fallback_run = next((runs[lbl] for lbl in gpu_labels), None)
        report.residency = residency(info, fallback_run or strict).to_dict()
    rejected_from = strict if strict.gpu.rejected else next(
        (runs[lbl] for lbl in gpu_labels if runs[lbl].gpu.rejected), strict)
    hist = info.op_histogram()
    report.unsupported_ops = [{"op": r.op, "reason": r.reason, "in_graph": hist.get(r.op, 0)}
                              for r in rejected_from.gpu.rejected]

    # 5. numerics: every GPU run against the CPU fp32 reference (and against `reference`)
    t0 = time.perf_counter()
    failures: list[tuple[str, str, str, str]] = []
    labels_ok = {lbl: True for lbl in gpu_labels}
    suspected_fallback: list[str] = []
    for s in sigs:
        outs = report.signatures.setdefault(s.key, {})
        for name in s.outputs:
            ref_cpu = cpu.outputs.get(s.key, {}).get(name)
            if ref_cpu is None:
                continue
            entry = outs.setdefault(name, {"shape": list(np.shape(ref_cpu)), "dtype": str(ref_cpu.dtype),
                                           "vs_cpu": {}, "vs_reference": {}})
            for lbl in gpu_labels:
                got = runs[lbl].outputs.get(s.key, {}).get(name)
                if got is None:
                    continue
                c = _compare_entry(got, ref_cpu, tol)
                c["suspected_cpu_fallback"] = bool(
                    lbl == "gpu_fp16" and c.get("bit_identical") and np.issubdtype(ref_cpu.dtype, np.floating)
                    and np.size(ref_cpu) > 1)
                entry["vs_cpu"][lbl] = c
                if c["suspected_cpu_fallback"]:
                    suspected_fallback.append(f"{s.key}/{name}")
                if not c["within_tolerance"]:
                    failures.append((lbl, s.key, name, c["symptom"]))
                    labels_ok[lbl] = False
            ref = refs.get(s.key, {}).get(name)
            if ref is not None:
                for lbl in ["cpu", *gpu_labels]:
                    got = runs[lbl].outputs.get(s.key, {}).get(name)
                    if got is None:
                        continue
                    c = _compare_entry(got, ref, tol)
                    if "error" in c:  # the caller's array does not have the output's shape
                        raise InputError(f"reference for {s.key}/{name}: {c['error']}")
                    entry["vs_reference"][lbl] = c
                    if not c["within_tolerance"]:
                        if lbl == "cpu":
                            report.problems.append(
                                f"{s.key}/{name}: the CPU result already differs from the reference "
                                f"({c['symptom']}, corr {c.get('corr')}): the conversion changed the numbers, "
                                "not the GPU")
                        else:
                            failures.append((f"{lbl} vs reference", s.key, name, c["symptom"]))
    if suspected_fallback:
        report.warnings.append("suspected silent CPU fallback: the GPU fp16 output is bit-identical to CPU fp32 "
                               f"for {', '.join(suspected_fallback)} (real fp16 execution drifts in the last digits)")
    timings["compare"] = time.perf_counter() - t0
    cpu_ref_bad = any("already differs from the reference" in p for p in report.problems)
    if cpu_ref_bad:
        report.suggestions.append({"symptom": "conversion_mismatch",
                                   "seen": "the converted graph on CPU differs from the source model",
                                   "cause": "the conversion (or a rewrite) changed the math; the GPU is not involved",
                                   "evidence": [p for p in report.problems if "already differs" in p],
                                   "rewrites": ["bisect"], "upstream": None})
    for lbl, sig, name, kind in failures:
        report.problems.append(f"{sig}/{name} on {lbl}: outside tolerance ({kind.replace('_', '-')})")

    # 6. verdict + suggestions
    if report.unsupported_ops:
        report.suggestions = _suggest_for_rejections(info, report.unsupported_ops) + report.suggestions
    if failures:
        report.suggestions += _suggest_for_numerics(info, failures, labels_ok)
    if not strict.ok:
        how = {STATUS_CRASH: "crashed", STATUS_TIMEOUT: "hung"}.get(strict.status)
        if how:
            detail = f"the GPU runtime {how}: {strict.error}"
        elif strict.status == STATUS_OPS_REJECTED:
            op_types = list(dict.fromkeys(r["op"] for r in report.unsupported_ops))
            detail = f"strict GPU compile rejected {len(op_types)} op type(s): {', '.join(op_types)}"
        else:
            detail = f"strict GPU compile/run failed ({strict.status}): {error_brief(strict)}"
        report.problems.insert(0, detail)
        fell_back = strict.status == STATUS_OPS_REJECTED and bool(gpu_labels)
        if not fell_back and gpu_labels == [] and strict.status == STATUS_OPS_REJECTED:
            report.problems.append("the GPU+CPU fallback compile failed too: "
                                   + "; ".join(f"{lbl}: {error_brief(r)}" for lbl, r in runs.items() if "+cpu" in lbl))
        verdict = FALLBACK if fell_back else COMPILE_FAIL
        summary = f"{detail}; {report.residency['line']}" if report.residency else detail
        if failures or cpu_ref_bad:
            summary += "; numbers also wrong: " + ", ".join(sorted({k for *_, k in failures} or {"conversion"}))
        return finish(verdict, summary)
    if failures or cpu_ref_bad:
        kinds = sorted({k for *_, k in failures}) or ["conversion mismatch"]
        return finish(NUMERICS_FAIL, f"{report.residency['line']}, but the numbers are wrong: "
                                     + ", ".join(k.replace("_", "-") for k in kinds))
    worst = min((c.get("corr") for o in report.signatures.values() for e in o.values()
                 for c in e["vs_cpu"].values() if c.get("corr") is not None), default=None)
    corr_text = f"; min corr vs CPU {worst:.6f}" if worst is not None else ""
    return finish(PASS, f"{report.residency['line']}; outputs within tolerance{corr_text}")


# ---------------------------------------------------------------------------------------------- CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the .tflite file to check")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT ('-' = stdout, no text)")
    p.add_argument("--inputs", metavar="NPZ", help="input arrays (.npz keyed by input name or SIGNATURE/NAME); "
                                                   "default: seeded random, integer ids kept in their table's range")
    p.add_argument("--reference", metavar="NPZ", help="the source model's outputs (.npz keyed by output name or "
                                                      "SIGNATURE/NAME): CPU and GPU are compared to them too")
    p.add_argument("--min-corr", type=float, default=None, metavar="C",
                   help="minimum Pearson correlation vs the reference (default 0.999 unless --rtol/--atol given)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance for an elementwise allclose test")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance for an elementwise allclose test")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1,...",
                   help="shape of a dynamic input (repeatable; dynamic dims default to 1)")
    p.add_argument("--int-range", action="append", metavar="NAME=LOW:HIGH",
                   help="value range [LOW, HIGH) of an integer input (repeatable; default: from the graph)")
    p.add_argument("--fp16-only", action="store_true", help="skip the fp32 (enforce_f32) GPU run")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per compile+run child (default 600)")
    p.add_argument("--full", action="store_true", help="print every detail even when the model passes")


def run(args: argparse.Namespace) -> int:
    from .report import print_report

    explicit_tol = args.rtol is not None or args.atol is not None
    min_corr = args.min_corr if args.min_corr is not None else (None if explicit_tol else 0.999)
    try:
        report = check_gpu_compatibility(
            args.model, inputs=args.inputs, reference=args.reference, seed=args.seed,
            shapes=parse_shape_args(args.shape), int_ranges=parse_int_range_args(args.int_range),
            min_corr=min_corr, rtol=args.rtol, atol=args.atol,
            precisions=("fp16",) if args.fp16_only else PRECISIONS, timeout=args.timeout)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(report.to_json())
    else:
        print_report(report, full=args.full)
        if args.json:
            report.to_json(args.json)
            print(f"report written to {args.json}")
    return EXIT_CODES[report.verdict]
