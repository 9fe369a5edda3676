"""The checker's steps, in order: static, inputs, cpu, gpu, numerics, verdict (see `checker`)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..lint.mobile import lint_for_mobile, phone_risk_line
from ..core.inputs import InputError, check_reference, make_inputs, model_signatures, split_by_signature
from ..core.model_info import InvalidModelError, ModelInfo, read_model_info
from .rejection_sites import rejected_sites
from ..runtime.residency import residency
from ..runtime.versions import installed_version
from ..runtime.compiled import (STATUS_CRASH, STATUS_KILLED, STATUS_NO_GPU, STATUS_OPS_REJECTED, STATUS_TIMEOUT,
                                RunResult, compile_and_run)
from .diagnosis import (
    LOW_SPREAD_STEPS,
    STEPS_MEASURE,
    _compare_entry,
    _environment,
    _run_entry,
    _static,
    _suggest_for_numerics,
    _suggest_for_rejections,
    error_brief,
    interesting_tail,
)
from .verdicts import COMPILE_FAIL, FALLBACK, INVALID_MODEL, NO_GPU, NUMERICS_FAIL, PASS, Report, Tolerance


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
    runtime: str | None = None        # another ai-edge-litert version to run under (`runtime.versions`)

    def run(self, label: str, accelerator: str, feeds, enforce_f32: bool = False) -> RunResult:
        r = compile_and_run(self.model, feeds, accelerator=accelerator, enforce_f32=enforce_f32, timeout=self.timeout,
                            runtime=self.runtime)
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
    labels: list[str]  # e.g. ["gpu_fp16", "gpu_fp32"] or ["gpu_fp16+cpu", ...]

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
    symptom: str  # "nonfinite" | "all_zero" | "degraded"
    measure: str = "corr"  # what decided (`diagnosis._judge`): corr, allclose, fp16 steps for a low-spread output

    def as_tuple(self) -> tuple[str, str, str, str]:
        return (self.label, self.signature, self.output, self.symptom)


@dataclass
class Numerics:
    """Step 5's result."""

    failures: list[NumericFailure] = field(default_factory=list)
    labels_ok: dict[str, bool] = field(default_factory=dict)
    suspected_fallback: list[str] = field(default_factory=list)  # "sig/name" bit-identical to the CPU
    by_steps: list[str] = field(default_factory=list)  # "sig/name": low spread, judged in fp16 steps, not corr
    cpu_mismatches: list[str] = field(default_factory=list)  # problems: the CPU already differs from reference

    @property
    def wrong(self) -> bool:
        return bool(self.failures or self.cpu_mismatches)

    def kinds(self) -> list[str]:
        return sorted({f.symptom for f in self.failures})


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
        report.warnings.append(
            "the model has no signature defs; checking graph 0 through the runtime's "
            "placeholder signature (inputs and outputs named by tensor name)"
        )
    big = report.static["high_rank_tensors"]
    if big:
        report.warnings.append(
            f"{len(big)} tensor(s) above rank 4 (the GPU handles rank <= 4): "
            + ", ".join(f"{b['tensor']} {b['shape']}" for b in big[:5])
        )
    return info


def _step_inputs(ctx: _Context, info: ModelInfo, inputs, reference, seed, shapes, int_ranges) -> PreparedInputs:
    """2. The arrays to feed; the caller's mistakes raise InputError (they are not the model's fault)."""
    t0 = time.perf_counter()
    feeds, specs, input_warnings = make_inputs(info, inputs, seed=seed, shapes=shapes, int_ranges=int_ranges)
    sigs = model_signatures(info)
    refs = split_by_signature(reference, {s.key: list(s.outputs) for s in sigs}, "output")
    for s in sigs:
        for name, arr in refs.get(s.key, {}).items():
            check_reference(s.key, name, arr)
            t = s.outputs[name]
            if t.is_dynamic:
                continue
            if np.size(arr) != int(np.prod(t.shape)):
                raise InputError(
                    f"reference for {s.key}/{name} has shape {list(np.shape(arr))}; the output is {list(t.shape)}"
                )
            if [d for d in np.shape(arr) if d != 1] != [d for d in t.shape if d != 1]:
                raise InputError(
                    f"reference for {s.key}/{name} has shape {list(np.shape(arr))}: the right size "
                    f"but not the output's shape {list(t.shape)} (only size-1 axes may differ)"
                )
    ctx.report.inputs = [s.to_dict() for s in specs]
    ctx.report.warnings += input_warnings
    ctx.timings["inputs"] = time.perf_counter() - t0
    return PreparedInputs(feeds, sigs, refs)


def _step_cpu_reference(ctx: _Context, prepared: PreparedInputs) -> RunResult:
    """3. CPU compile + run: the fp32 reference, and proof that LiteRT can run the file at all."""
    report = ctx.report
    cpu = ctx.run("cpu", "cpu", prepared.feeds)
    if not cpu.ok and cpu.status not in (STATUS_KILLED, STATUS_TIMEOUT) and ctx.runtime is not None:
        # An older runtime's CPU (XNNPACK) can refuse a graph its GPU runs: the file is still valid if the
        # installed runtime's CPU runs it, and the GPU verdict under the other version must not hang on that.
        own = compile_and_run(ctx.model, prepared.feeds, accelerator="cpu", timeout=ctx.timeout,
                              runtime=installed_version())
        if own.ok:
            report.warnings.append(f"ai-edge-litert {ctx.runtime}'s CPU could not run the model ({cpu.status}: "
                                   f"{error_brief(cpu)}); the reference is the installed runtime's CPU "
                                   f"({installed_version()})")
            ctx.runs["cpu"], cpu = own, own
    if cpu.status == STATUS_KILLED:
        report.log_tail = interesting_tail(cpu.log)
        report.problems.append(f"the CPU runtime process: {cpu.error}")
        raise _Verdict(COMPILE_FAIL, f"the CPU reference run did not finish: {cpu.error}; rerun with more memory")
    if not cpu.ok:
        report.log_tail = interesting_tail(cpu.log)
        what = {STATUS_CRASH: "the CPU runtime crashed",
                STATUS_TIMEOUT: f"the CPU runtime did not finish within {ctx.timeout:g} s (it hangs on this "
                                "model, or the timeout is too short for this machine)"}.get(
            cpu.status, "LiteRT could not compile or run the model on the CPU"
        )
        report.problems.append(f"{what} ({cpu.status}): {error_brief(cpu)}")
        raise _Verdict(INVALID_MODEL, f"{what} ({cpu.status}): {error_brief(cpu)}")
    for sig, outs in cpu.outputs.items():
        for name, arr in outs.items():
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(np.asarray(arr, dtype=np.float64))))
            if bad:
                report.warnings.append(
                    f"{sig}/{name}: the CPU reference itself has {bad} non-finite value(s) "
                    "(the model or the inputs, not the GPU)"
                )
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
                report.warnings.append(
                    f"strict GPU {p} compile/run failed ({r.status}) although {precisions[0]} passed: {error_brief(r)}"
                )
    else:
        report.log_tail = interesting_tail(strict.log)
        if strict.status not in (STATUS_TIMEOUT, STATUS_KILLED):  # a hang would only hang again
            for p in precisions:
                r = ctx.run(f"gpu_{p}+cpu", "gpu+cpu", prepared.feeds, enforce_f32=p == "fp32")
                if r.ok:
                    labels.append(f"gpu_{p}+cpu")
        fallback_run = next((ctx.runs[lbl] for lbl in labels), None)
        report.residency = residency(info, fallback_run or strict).to_dict()
    rejected_from = (
        strict if strict.gpu.rejected else next((ctx.runs[lbl] for lbl in labels if ctx.runs[lbl].gpu.rejected), strict)
    )
    hist = info.op_histogram()
    report.unsupported_ops = [_rejected(info, r, hist) for r in rejected_from.gpu.rejected]
    return GpuRuns(strict, labels)


def _rejected(info, r, hist: dict) -> dict:
    """One rejected op type for the report; `sites` / `rule`: the nodes that break the rule behind the reason,
    where the reason is a rule about one node's inputs (`rejection_sites`)."""
    entry = {"op": r.op, "reason": r.reason, "in_graph": hist.get(r.op, 0)}
    found = rejected_sites(info, r.op, r.reason)
    if found is not None:
        entry["sites"], entry["rule"] = found
    return entry


def _looks_like_cpu_fallback(label: str, cmp_entry: dict, ref: np.ndarray) -> bool:
    """A strict fp16 GPU output bit-identical to CPU fp32 suggests the CPU ran it -- unless identity is expected:
    fewer than two distinct finite values (all inf / nan, constant, all zero), or integer-valued outputs."""
    if not (
        label == "gpu_fp16"
        and cmp_entry.get("bit_identical")
        and np.issubdtype(ref.dtype, np.floating)
        and np.size(ref) > 1
    ):
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
            entry = outs.setdefault(
                name, {"shape": list(np.shape(ref_cpu)), "dtype": str(ref_cpu.dtype), "vs_cpu": {}, "vs_reference": {}}
            )
            for lbl in gpu.labels:
                got = runs[lbl].outputs.get(s.key, {}).get(name)
                if got is None:
                    continue
                c = _compare_entry(got, ref_cpu, tol)
                c["suspected_cpu_fallback"] = _looks_like_cpu_fallback(lbl, c, ref_cpu)
                entry["vs_cpu"][lbl] = c
                if c["suspected_cpu_fallback"]:
                    num.suspected_fallback.append(f"{s.key}/{name}")
                if STEPS_MEASURE in c["measure"] and f"{s.key}/{name}" not in num.by_steps:
                    num.by_steps.append(f"{s.key}/{name}")
                if not c["within_tolerance"]:
                    num.failures.append(NumericFailure(lbl, s.key, name, c["symptom"], c["measure"]))
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
                    problem = (
                        f"{s.key}/{name}: the CPU result already differs from the reference "
                        f"({c['symptom']}, corr {c.get('corr')}): the conversion changed the numbers, "
                        "not the GPU"
                    )
                    report.problems.append(problem)
                    num.cpu_mismatches.append(problem)
                else:
                    num.failures.append(NumericFailure(f"{lbl} vs reference", s.key, name, c["symptom"],
                                                       c["measure"]))
    if num.suspected_fallback:
        report.warnings.append(
            "suspected silent CPU fallback: the GPU fp16 output is bit-identical to CPU fp32 "
            f"for {', '.join(num.suspected_fallback)} (real fp16 execution drifts in the last "
            "digits)"
        )
    ctx.timings["compare"] = time.perf_counter() - t0
    if num.cpu_mismatches:
        report.suggestions.append(
            {
                "symptom": "conversion_mismatch",
                "seen": "the converted graph on CPU differs from the source model",
                "cause": "the conversion (or a rewrite) changed the math; the GPU is not involved",
                "evidence": list(num.cpu_mismatches),
                "rewrites": ["bisect"],
                "upstream": None,
            }
        )
    for f in num.failures:
        how = f"; {f.measure}" if STEPS_MEASURE in f.measure or f.measure == "allclose" else ""
        report.problems.append(
            f"{f.signature}/{f.output} on {f.label}: outside tolerance ({f.symptom.replace('_', '-')}{how})"
        )
    if num.by_steps:
        report.warnings.append(
            f"judged by the largest error in fp16 steps, not by corr: {', '.join(num.by_steps)} (a spread under "
            f"{LOW_SPREAD_STEPS} fp16 steps at the output's magnitude: fp16 rounding alone lowers corr there)")
    return num


def inputs_used(report) -> str:
    """Which inputs the numbers come from: the caller's, random ones, or both."""
    given = {i.get("source") == "caller array" for i in report.inputs}
    if given == {True}:
        return "the caller's inputs"
    return "the caller's and random inputs" if True in given else "random inputs"


def _step_verdict(ctx: _Context, info: ModelInfo, gpu: GpuRuns, num: Numerics) -> tuple[str, str]:
    """6. Verdict, summary and the suggested rewrites."""
    report, runs, strict = ctx.report, ctx.runs, gpu.strict
    if report.unsupported_ops:
        report.suggestions = _suggest_for_rejections(info, report.unsupported_ops) + report.suggestions
    if num.failures:
        report.suggestions += _suggest_for_numerics(info, [f.as_tuple() for f in num.failures], num.labels_ok)
    if not strict.ok:
        how = {
            STATUS_CRASH: "the GPU runtime crashed",
            STATUS_TIMEOUT: "the GPU runtime hung",
            STATUS_KILLED: "the GPU run did not finish",
        }.get(strict.status)
        if how:
            detail = f"{how}: {strict.error}"
        elif strict.status == STATUS_OPS_REJECTED:
            op_types = list(dict.fromkeys(r["op"] for r in report.unsupported_ops))
            detail = f"strict GPU compile rejected {len(op_types)} op type(s): {', '.join(op_types)}"
        else:
            detail = f"strict GPU compile/run failed ({strict.status}): {error_brief(strict)}"
        report.problems.insert(0, detail)
        if not gpu.labels and strict.status == STATUS_OPS_REJECTED:
            report.problems.append(
                "the GPU+CPU fallback compile failed too: "
                + "; ".join(f"{lbl}: {error_brief(r)}" for lbl, r in runs.items() if "+cpu" in lbl)
            )
        verdict = FALLBACK if gpu.fell_back else COMPILE_FAIL
        summary = f"{detail}; {report.residency['line']}" if report.residency else detail
        if num.wrong:
            summary += "; numbers also wrong: " + ", ".join(num.kinds() or ["conversion"])
        return verdict, summary
    used = inputs_used(report)
    if num.wrong:
        kinds = num.kinds() or ["conversion mismatch"]
        if used != "the caller's inputs":
            report.warnings.append(
                f"this verdict rests on {used}: a model can be right on its real inputs and wrong on random ones "
                "(out of its range); check with real inputs (inputs=..., --inputs FILE.npz) before rewriting")
        return NUMERICS_FAIL, (
            f"{report.residency['line']}, but the numbers are wrong on {used}: "
            + ", ".join(k.replace("_", "-") for k in kinds)
        )
    worst = min(
        (
            c.get("corr")
            for o in report.signatures.values()
            for e in o.values()
            for c in e["vs_cpu"].values()
            if c.get("corr") is not None
        ),
        default=None,
    )
    corr_text = f"; min corr vs CPU {worst:.6f}" if worst is not None else ""
    steps_text = f"; {len(num.by_steps)} low-spread output(s) judged in fp16 steps" if num.by_steps else ""
    return PASS, f"{report.residency['line']}; outputs within tolerance on {used}{corr_text}{steps_text}"
