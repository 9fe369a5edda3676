"""What the checker says about a run: brief errors, the telling log lines, per-output judgements, suggestions."""
from __future__ import annotations

import math
import platform
import re

import numpy as np

from ..core import symptoms as symptom_table
from ..core.inputs import model_signatures
from ..core.metrics import Comparison, compare
from ..core.model_info import ModelInfo
from ..core.ops import REDUCTION_OPS
from ..runtime.compiled import (RunResult)
from .verdicts import Tolerance, _LOG_NOISE


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


# An output whose spread is this few fp16 steps (at its own magnitude) cannot show a correlation fp16 keeps: the
# rounding of each value alone is a large share of its variation (a depth map of 5.0 +- 0.045 is 11 steps of
# 0.0039 wide, and correct fp16 arithmetic gives corr ~0.99 there). Such an output is judged by its largest
# error in those steps instead: at most LOW_SPREAD_MAX_STEPS (0.4-0.8 % of the magnitude), which still fails a
# flat or scrambled output. A comparison decided so has STEPS_MEASURE in its `measure`.
LOW_SPREAD_STEPS = 32
LOW_SPREAD_MAX_STEPS = 8
STEPS_MEASURE = "fp16 steps"
# Below fp16's smallest normal number values are subnormal (10 bits of spacing, no relative precision) or flushed
# to zero: an output living there is an underflow, not a low spread. (A HF EfficientNet at a small config, outputs
# ~1e-7: corr 0.18 in fp16 and a PASS in 1.2 "steps" of the subnormal spacing, before this bound.)
FP16_MIN_NORMAL = 2.0 ** -14


def fp16_step(magnitude: float) -> float:
    """The spacing of fp16 values at `magnitude` (the subnormal spacing below fp16's smallest normal)."""
    if not magnitude > 0 or not math.isfinite(magnitude):
        return 2.0 ** -24
    return 2.0 ** (max(math.floor(math.log2(magnitude)), -14) - 10)


def low_spread(ref: np.ndarray) -> tuple[float, float] | None:
    """(spread in fp16 steps, one step) when `ref`'s standard deviation is under LOW_SPREAD_STEPS fp16 steps
    at its largest magnitude, else None."""
    r = np.asarray(ref, dtype=np.float64)
    r = r[np.isfinite(r)]
    if r.size < 2:
        return None
    largest = float(np.abs(r).max())
    if largest < FP16_MIN_NORMAL:
        return None                             # an underflow, not a low spread (`_judge`)
    step = fp16_step(largest)
    spread = float(r.std()) / step
    return (spread, step) if 0 < spread < LOW_SPREAD_STEPS else None


def _judge(cmp: Comparison, out: np.ndarray, ref: np.ndarray, tol: Tolerance) -> tuple[str | None, str]:
    """(None when `out` is within tolerance of `ref`, else the symptom: nonfinite / all_zero / degraded;
    the measure that decided)."""
    ref_nonfinite = int(np.size(ref) - np.count_nonzero(np.isfinite(np.asarray(ref, dtype=np.float64))))
    if cmp.nonfinite > ref_nonfinite:
        return "nonfinite", "non-finite values"
    if cmp.all_zero:
        return "all_zero", "all zero"
    o = np.asarray(out, dtype=np.float64).reshape(np.shape(ref))
    r = np.asarray(ref, dtype=np.float64)
    if tol.rtol is not None or tol.atol is not None:
        if not np.allclose(o, r, rtol=tol.rtol or 0.0, atol=tol.atol or 0.0, equal_nan=True):
            return "degraded", "allclose"
    if tol.min_corr is None:
        return None, "allclose"
    finite = r[np.isfinite(r)]
    if not math.isfinite(cmp.corr) and (finite.size < 2 or float(finite.std()) == 0.0):
        # a constant reference or a single value: no correlation to speak of
        scale = float(np.abs(finite).max()) if finite.size else 1.0
        ok = np.allclose(o, r, rtol=1e-2, atol=1e-3 * max(scale, 1.0), equal_nan=True)
        return (None if ok else "degraded"), "relative error (constant output)"
    if math.isfinite(cmp.corr) and cmp.corr >= tol.min_corr:
        return None, "corr"           # (a constant output against a varying reference has no corr: not within)
    largest = float(np.abs(finite).max()) if finite.size else 0.0
    if 0.0 < largest < FP16_MIN_NORMAL:
        return "degraded", (f"underflow: every |value| is below fp16's smallest normal number ({largest:.2g} < "
                            f"{FP16_MIN_NORMAL:.2g}; corr {cmp.corr:.4f}): fp16 cannot hold this output -- scale it "
                            "up by a power of two inside the model and back outside")
    spread = low_spread(r)
    if spread is None:
        return "degraded", "corr"
    steps = cmp.max_abs / spread[1]
    ok = steps <= LOW_SPREAD_MAX_STEPS
    return (None if ok else "degraded"), (
        f"max error {steps:.1f} {STEPS_MEASURE} {'<=' if ok else '>'} {LOW_SPREAD_MAX_STEPS} (low spread: std "
        f"{spread[0]:.1f} steps of {spread[1]:.2g}; corr {cmp.corr:.4f} not telling)")


def _compare_entry(out, ref, tol: Tolerance) -> dict:
    try:
        cmp = compare(out, ref)
    except ValueError as exc:
        return {"error": str(exc), "within_tolerance": False, "symptom": "degraded", "measure": "shape"}
    symptom, measure = _judge(cmp, out, ref, tol)
    return {**cmp.to_dict(), "within_tolerance": symptom is None, "symptom": symptom, "measure": measure}


def _environment(runs: dict[str, RunResult]) -> dict:
    from ..core import __version__
    from ..runtime.residency import runtime_version

    side = next((run.runtime for run in runs.values() if run.runtime), None)
    env = {"ai_edge_litert": side or runtime_version(), "toolkit": __version__, "python": platform.python_version(),
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
    """failures: (label, signature, output, symptom) for each GPU comparison outside tolerance. Only the rules
    of the class the runs show (fp16 only: precision; fp32 as wrong: a GPU miscompute), and of those only the
    rewrites with an op to act on in this graph (`symptoms.in_graph`)."""
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
        fp32_too = any(lbl.startswith("gpu_fp32") for lbl, _, _ in hits)
        if fp16_only:
            evidence.append("the fp32 GPU run (enforce_f32) is within tolerance: an fp16 range/precision problem")
        elif fp32_too:
            evidence.append("fp32 on the GPU fails too: a GPU miscompute, not fp16 precision -- bisect names the op")
        if reductions and not fp32_too:
            evidence.append(f"candidate reductions in the graph: {reductions}")
        wrong_class = "both" if fp16_only else "fp16" if fp32_too else None
        for s in symptom_table.for_numeric(kind):
            if s.fails_in == wrong_class:
                continue
            rewrites = [r for r in s.rewrites if symptom_table.in_graph(r, hist)]
            if not rewrites:
                continue
            out.append({"symptom": s.id, "seen": s.seen, "cause": s.cause, "evidence": evidence,
                        "rewrites": rewrites, "upstream": s.upstream})
    return out
