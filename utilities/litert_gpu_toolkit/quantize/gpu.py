"""Quantize a converted .tflite's weights and keep only what the GPU runs right: `quantize_for_gpu`.

    from litert_gpu_toolkit.quantize import quantize_for_gpu
    result = quantize_for_gpu("model.tflite", "model_int8.tflite", "int8", inputs=feeds, reference=torch_outputs)
    print(result.line())      # int8: 36 of 37 weight tensors; kept float: ...

Every try is a file checked strictly GPU-only (no CPU fallback) on the same inputs: the GPU against the source
model (`reference`; without one, the float file's CPU output) at the mode's corr floor, fp16 and fp32 runs alike,
and against LiteRT's CPU on the same file -- except where integer weights sit on the op: there LiteRT's CPU
quantizes the activations on the fly and the GPU does not, so the two differ by design and only the source judges.
The search, each step a checked file:
  1. every weight type in the mode's first form (`plan.MODES`) -- most models stop here;
  2. else each type alone, its forms in order; for a type none of whose forms passes, its layers are added in
     chunks, largest weights first, each chunk halved when the file fails with it (`_grow`): what could not join
     stays float;
  3. the passing types together; if that fails, types are added one at a time, largest first, each kept only
     when the file still passes.
The file written is never worse than the float one: when no quantized form passes, `output` gets the float
file and `result.why` says why.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.quiet import stage
from .fc_rank2 import fc_rank2
from .forms import FORMS, quantize_tflite
from .plan import DEFAULT_MIN_CORR, LEFT_FLOAT, MODES, WeightOp, check_mode, weight_ops


@dataclass
class Outcome:
    """One checked try: ok only at full GPU residency with GPU ~ CPU and GPU ~ source at the floor."""
    ok: bool
    why: str                                    # "" when ok
    by_run: dict = field(default_factory=dict)     # run ("cpu", "gpu_fp16", "gpu_fp32") -> "sig/output" -> agreement
    report: object = None
    size: int = 0

    @property
    def fidelity(self) -> dict:
        """"sig/output" -> agreement of the GPU fp16 output with the source."""
        return self.by_run.get("gpu_fp16", {})


@dataclass
class QuantizeResult:
    mode: str
    path: Path | None
    ok: bool                                    # the written file is quantized and passed
    forms: dict = field(default_factory=dict)   # op name -> form (the quantized weights)
    kept_float: dict = field(default_factory=dict)   # op name -> why it stayed float
    ops: list = field(default_factory=list)     # every WeightOp the mode could quantize
    size_float: int = 0
    size: int = 0
    by_run: dict = field(default_factory=dict)  # run -> "sig/output" -> corr with the source (cpu, gpu_fp16, gpu_fp32)
    report: object = None
    tries: list = field(default_factory=list)   # one line per checked file
    why: str = ""                               # why the float file was written instead (not ok)
    rank2: int = 0                              # FULLY_CONNECTEDs moved to a rank-2 input first (`fc_rank2`)
    left: dict = field(default_factory=dict)    # op name -> why the mode does not quantize its type (not tried)
    weights: dict = field(default_factory=dict)  # op name -> its weight's tensor name (for `left` ops)
    notes: list = field(default_factory=list)   # per type: a form that failed and the one used instead

    def line(self) -> str:
        """One line: how many weight tensors are quantized, in which forms, which stayed float and why."""
        if self.mode == "fp32":
            return "fp32: weights left as they are"
        if not self.ok and self.why:
            return f"{self.mode}: not applied, the float file is written: {self.why}"
        if not self.ops:
            return f"{self.mode}: no weight this mode quantizes (the file is the float one)"
        by_form = {}
        for name, form in self.forms.items():
            by_form[form] = by_form.get(form, 0) + 1
        forms = ", ".join(f"{n} {FORMS[f].describe()}" for f, n in by_form.items())
        total = len(self.ops) + len(self.left)
        text = f"{self.mode}: {len(self.forms)} of {total} weight tensors ({forms})"
        if self.kept_float or self.left:
            kept = {}
            for name, why in {**self.kept_float, **self.left}.items():
                kept.setdefault(why, []).append(name)
            text += "; kept float: " + "; ".join(
                f"{_names([self.label(n) for n in names])} ({why})" for why, names in kept.items())
        return text

    def label(self, name: str) -> str:
        """A layer's name for people: its weight's module path (an op's output may be just 'output_0')."""
        weight = next((w.weight for w in self.ops if w.name == name), None) or self.weights.get(name)
        for candidate in (weight, name):       # whichever carries a module path ('arith.constant1' does not)
            if candidate and short_name(candidate) != _segment(candidate):
                return short_name(candidate)
        return _segment(weight or name)

    @property
    def fidelity(self) -> dict:
        """"sig/output" -> agreement of the GPU fp16 output with the source."""
        return self.by_run.get("gpu_fp16", {})

    @property
    def no_gpu(self) -> bool:
        """Nothing could be checked: no GPU adapter (the float file was written)."""
        return not self.ok and self.why.startswith("NO_GPU")

    def to_dict(self) -> dict:
        """The JSON form: the line, sizes, per-layer forms and kept-float reasons, fidelity, each try."""
        return {"mode": self.mode, "ok": self.ok, "line": self.line(), "path": str(self.path) if self.path else None,
                "size_float": self.size_float, "size": self.size, "rank2_fully_connected": self.rank2,
                "forms": {self.label(k): v for k, v in self.forms.items()},
                "kept_float": {self.label(k): v for k, v in {**self.kept_float, **self.left}.items()},
                "notes": self.notes,
                "fidelity_gpu_fp16_vs_source": self.fidelity, "vs_source": self.by_run,
                "why": self.why, "tries": self.tries,
                "check": self.report.to_dict() if self.report is not None else None}

    def summary(self, check: bool = True) -> str:
        """The line, size, fidelity, (check: the quantized file's check summary), notes."""
        lines = [self.line()]
        if self.size_float:
            lines.append(f"  size: {self.size / 2**20:.2f} MiB ({self.size / self.size_float:.0%} of the float "
                         f"file's {self.size_float / 2**20:.2f} MiB)")
        if self.by_run:
            lines.append("  vs source, min corr: " + ", ".join(
                f"{label} {min(corr.values()):.6f}" for label, corr in self.by_run.items() if corr))
        if check and self.report is not None:
            lines.append(f"  check: {self.report.summary}")
        lines += [f"  {note}" for note in self.notes]
        if self.rank2 and self.ok:
            lines.append(f"  {self.rank2} FULLY_CONNECTED read their input at rank 2 (fc_rank2, bit-exact: integer "
                         "weights on a rank-3 FC compute wrong on the GPU)")
        if len(self.tries) > 1:
            lines.append(f"  files checked: {len(self.tries)}")
        return "\n".join(lines)


def _segment(tensor: str) -> str:
    return tensor.split(";")[0].rsplit("/", 1)[-1]


_ATTR = re.compile(r"(?:[\w<>]+\.)*[A-Z]\w*?_(.+)")      # 'pkg.mod.Class_attr' -> 'attr'


def short_name(tensor: str) -> str:
    """The module path in a converted tensor's name: each '/'-separated 'pkg.Class_attr' scope gives its attr,
    the wrappers' leading 'model' dropped ('.../FasterNet_model/...Sequential_stages/...Block_0/...Sequential_mlp/
    torch.nn.modules.conv.Conv2d_3;...' -> 'stages.0.mlp.3'; '...torch.nn.modules.linear.Linear_encoder.layer.0.
    query;...' -> 'encoder.layer.0.query'); the name's last segment when it has no scope."""
    scopes = tensor.split(";")[0].split("/")
    path = ".".join(m.group(1) for m in map(_ATTR.match, scopes) if m).split(".")
    while len(path) > 1 and path[0] == "model":
        path = path[1:]
    return ".".join(path) if path != [""] else _segment(tensor)


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


class _Search:
    """The fixed parts of one quantization: the float bytes, the inputs, the reference, the floor, the budget."""

    def __init__(self, data: bytes, feeds: dict, reference: dict, min_corr: float, budget_s: float, work: Path):
        self.data, self.feeds, self.reference, self.min_corr = data, feeds, reference, min_corr
        self.deadline = time.monotonic() + budget_s
        self.work, self.tries, self.n, self.seen = work, [], 0, {}

    @property
    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def attempt(self, plan: dict, keep: frozenset = frozenset(), final: bool = False) -> Outcome:
        """The checked outcome of quantizing `plan` ({op type: form}) less the layers in `keep` (cached)."""
        key = (tuple(sorted(plan.items())), keep, final)
        if key in self.seen:
            return self.seen[key]
        if not final and key[:2] + (True,) in self.seen:   # a final check ran fp16 too
            return self.seen[key[:2] + (True,)]
        self.seen[key] = out = self._attempt(plan, keep, final)
        return out

    def _attempt(self, plan: dict, keep: frozenset, final: bool) -> Outcome:
        from ..check.checker import check_gpu_compatibility

        label = ", ".join(f"{op} {form}" for op, form in plan.items()) + (f" (-{len(keep)} float)" if keep else "")
        try:
            data = quantize_tflite(self.data, plan, keep_float=tuple(sorted(keep)))
        except Exception as e:                      # noqa: BLE001 - the quantizer refusing a plan is a result
            text = str(e)
            out = Outcome(False, f"the quantizer refused it: {type(e).__name__}: "
                                 f"{text if len(text) < 200 else '...' + text[-200:]}")
            self.tries.append(f"{label}: {out.why}")
            return out
        self.n += 1
        path = self.work / f"try{self.n}.tflite"
        path.write_bytes(data)
        precisions = ("fp16", "fp32") if final else ("fp16",)
        # Integer weights on the op: LiteRT's CPU quantizes the activations to int8 on the fly, the GPU keeps them
        # float, so the two differ by design (an LLM's outlier activations: corr < 0.9 between them while the GPU
        # stays at 0.999 against torch). Then the CPU is no judge: the GPU is held to the source, and the check
        # only asks residency and finite, non-zero outputs of it.
        dynamic = any(FORMS[f].kind == "dynamic" for f in plan.values())
        report = check_gpu_compatibility(path, inputs=self.feeds, precisions=precisions,
                                         min_corr=None if dynamic else self.min_corr)
        out = Outcome(report.ok, "" if report.ok else _why(report), report=report, size=len(data))
        out.by_run = {label: _fidelity(report, self.reference, label) for label in ("cpu", "gpu_fp16", "gpu_fp32")}
        out.by_run = {label: corr for label, corr in out.by_run.items() if corr}
        low = {f"{k}, {label}": v for label, corr in out.by_run.items() if label != "cpu"
               for k, v in corr.items() if not v >= self.min_corr}
        if out.ok and low:
            worst = min(low.items(), key=lambda kv: kv[1])
            out.ok, out.why = False, f"GPU vs source corr {worst[1]:.4f} < {self.min_corr:g} ({worst[0]})"
        out.path = path
        self.tries.append(f"{label}: {'PASS' if out.ok else out.why}")
        stage(f"quantize try {self.n}: {label}: {'PASS' if out.ok else out.why}")
        return out


def _why(report) -> str:
    if report.verdict == "NO_GPU":
        return f"NO_GPU: {report.summary[:200]}"
    if report.verdict == "NUMERICS_FAIL":
        return f"the GPU computes it wrong ({report.summary[:160]})"
    return f"{report.verdict}: {report.summary[:200]}"


def _fidelity(report, reference: dict, label: str) -> dict:
    """{"sig/output": corr of run `label`'s output with the source's}; {} when that run has no outputs."""
    got = (getattr(report, "outputs", None) or {}).get(label, {})
    corr = {}
    for sig, outs in reference.items():
        for name, ref in outs.items():
            arr = got.get(sig, {}).get(name)
            if arr is None:
                continue
            corr[f"{sig}/{name}"] = agreement(np.asarray(arr, np.float64).ravel(), np.asarray(ref, np.float64).ravel())
    return corr


SMALL = 16          # outputs with fewer values (a probability, a score) are judged by their relative error


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    """How well `a` reproduces the source's `b`, on the corr scale: Pearson's r for an output of SMALL or more
    values that varies; for a scalar-like output (corr is undefined or meaningless) 1 - max|a - b| / max|b|,
    clipped to [0, 1]. NaN when the sizes differ or `a` is not finite."""
    if a.size != b.size or not np.isfinite(a).all():
        return float("nan")
    if a.size >= SMALL and a.std() > 0 and b.std() > 0:
        return float(np.corrcoef(a, b)[0, 1])
    scale = float(np.abs(b).max()) if b.size else 0.0
    err = float(np.abs(a - b).max()) if a.size else 0.0
    return 1.0 if err == 0 else max(0.0, 1.0 - err / scale) if scale > 0 else 0.0


def _grow(search: _Search, op: str, form: str, layers: list[WeightOp], why: dict) -> list[str]:
    """The layers of `op` quantized in `form`, grown greedily: a chunk (largest weights first) joins when the file
    still passes with it, else its halves are tried, down to single layers. Quantization error adds up over
    layers, so no single layer need be at fault; this keeps as many as the floor allows. Each chunk is judged as
    the result will be (fp16 and fp32 GPU runs): a set grown on fp16 alone could fail the final check at fp32, and
    then nothing of the type would be quantized (measured: timm FasterNet-T0, grown to fp16 0.990, fp32 0.984).
    Stops growing when the search's time is out. `why`: layer -> the failure of the smallest chunk it was tried
    in."""
    names = [w.name for w in sorted(layers, key=lambda w: -w.nbytes)]
    chosen: list[str] = []

    def grow(chunk: list[str]) -> None:
        if search.out_of_time:
            return
        keep = frozenset(n for n in names if n not in chosen and n not in chunk)
        out = search.attempt({op: form}, keep, final=True)
        if out.ok:
            chosen.extend(chunk)
            return
        why.update({n: out.why for n in chunk})
        if len(chunk) > 1:
            grow(chunk[:len(chunk) // 2])
            grow(chunk[len(chunk) // 2:])

    grow(names)
    return chosen


def _per_type(search: _Search, mode: str, ops: list[WeightOp], kept: dict, notes: list) -> tuple[dict, set]:
    """Each op type alone: its first passing form, else its culprit layers kept float, else the whole type."""
    plan, keep = {}, set()
    for op, forms in MODES[mode].items():
        names = [w.name for w in ops if w.op == op]
        if not names:
            continue
        last = ""
        for form in forms:
            out = search.attempt({op: form})
            if out.ok:
                plan[op] = form
                if last:
                    notes.append(f"{op}: {forms[0]} fails ({last}); {form} used")
                break
            last = out.why
        if op in plan:
            continue
        why: dict = {}
        layers = [w for w in ops if w.op == op]
        chosen = _grow(search, op, forms[0], layers, why) if len(names) > 1 and not search.out_of_time else []
        if chosen:
            plan[op] = forms[0]
            left = set(names) - set(chosen)
            keep |= left
            kept.update({n: why.get(n, last) for n in left})
        else:
            kept.update({n: last for n in names})
    return plan, keep


def _together(search: _Search, plan: dict, keep: set, ops: list[WeightOp], kept: dict) -> tuple[dict, Outcome]:
    """The passing types together; else added one at a time, largest weight bytes first."""
    out = search.attempt(plan, frozenset(keep), final=True)
    if out.ok or len(plan) < 2:
        return plan, out
    size = {op: sum(w.nbytes for w in ops if w.op == op) for op in plan}
    chosen, best = {}, None
    for op in sorted(plan, key=lambda o: -size[o]):
        trial = {**chosen, op: plan[op]}
        o = search.attempt(trial, frozenset(keep), final=True)
        if o.ok:
            chosen, best = trial, o
        else:
            kept.update({w.name: f"passes alone, not with the other types ({o.why})" for w in ops if w.op == op})
    return chosen, best or out


def quantize_for_gpu(model: str | os.PathLike, output: str | os.PathLike, weights: str = "int8", *,
                     inputs=None, reference: dict | None = None, min_corr: float | None = None,
                     budget_s: float = 900.0, seed: int = 0, float_report=None) -> QuantizeResult:
    """Write `model`'s weights in the `weights` mode (fp32, fp16, int8, int4) to `output`, checked on the GPU.

    inputs: {sig: {name: array}}, {name: array} or an .npz path (default: the checker's seeded random inputs);
    reference: the source model's outputs on those inputs, the same forms (default: the float file's CPU
    output). Bad inputs or references raise `InputError` (a ValueError). min_corr: the floor the GPU outputs
    keep against the source and against the CPU (default: `plan.DEFAULT_MIN_CORR[weights]`, or, when the
    float file itself sits below it on the GPU, the float file's agreement less the mode's allowance).
    budget_s: seconds after which the per-layer search stops growing (what it found by then is kept).
    float_report: the caller's GPU check of `model` on the same inputs (its outputs), so the float file's own
    agreement with the source is not measured a second time. `output` may not be `model` (ValueError). The
    file written is the float one when nothing quantized passes.
    """
    import tempfile

    from ..core.inputs import make_inputs, model_signatures, split_by_signature
    from ..core.model_info import read_model_info
    from ..runtime.compiled import compile_and_run

    check_mode(weights)
    src, dst = Path(model), Path(output)
    if dst.exists() and src.resolve() == dst.resolve():
        raise ValueError(f"{dst}: the output may not be the input file")
    original = src.read_bytes()
    read_model_info(original)                  # InvalidModelError (a ValueError) for a file that is no model
    data, rank2 = original, 0
    if any(FORMS[f].kind == "dynamic" for f in MODES[weights].get("FULLY_CONNECTED", ())):
        data, rank2 = fc_rank2(original)       # bit-exact; integer-weight FCs are right on the GPU only at rank 2
    info = read_model_info(data)
    ops = weight_ops(info, tuple(MODES[weights]))
    result = QuantizeResult(weights, dst, False, ops=ops, size_float=len(original), size=len(original))
    result.rank2 = rank2
    for w in weight_ops(info):                 # weights of types this mode leaves float, and why
        if w.op not in MODES[weights] and weights != "fp32":
            result.left[w.name] = LEFT_FLOAT.get((weights, w.op), f"the {weights} mode does not quantize {w.op}")
            result.weights[w.name] = w.weight
    if not ops:
        _write(original, dst)
        result.ok = weights == "fp32"
        return result
    feeds, _, _ = make_inputs(info, inputs, seed=seed)
    if reference is None:
        run = compile_and_run(data, feeds, accelerator="cpu")
        if not run.ok:
            raise RuntimeError(f"the float file does not run on LiteRT's CPU: {run.error}")
        reference = run.outputs
    else:
        reference = split_by_signature(reference, {g.key: list(g.outputs) for g in model_signatures(info)},
                                       "output")
    floor = DEFAULT_MIN_CORR[weights] if min_corr is None else float(min_corr)
    with tempfile.TemporaryDirectory(prefix="litert-quantize-") as tmp:
        search = _Search(data, feeds, reference, floor, budget_s, Path(tmp))
        if min_corr is None:
            _float_floor(search, result, float_report)
        out = _search(search, weights, ops, result)
        result.tries = search.tries
        if out is not None and out.ok:
            _write(out.path.read_bytes(), dst)
            result.ok, result.size, result.by_run, result.report = True, out.size, out.by_run, out.report
        else:
            _write(original, dst)
            result.forms, result.why = {}, (out.why if out is not None else "no form of any weight passed")
    return result


def _float_floor(search: _Search, result: QuantizeResult, report=None) -> None:
    """Measure where the float file itself stands against the source on the GPU; when that is below the mode's
    floor, the floor becomes the float file's agreement less the mode's allowance (1 - floor): quantizing may cost
    what the floor allows, counted from the float file (an fp16 GPU run of a float file is not exact either)."""
    if report is None:                         # else: the caller's check of the float file on these inputs
        from ..check.checker import check_gpu_compatibility

        path = search.work / "float.tflite"
        path.write_bytes(search.data)
        report = check_gpu_compatibility(path, inputs=search.feeds, precisions=("fp16", "fp32"), min_corr=None)
    runs = [_fidelity(report, search.reference, label) for label in ("gpu_fp16", "gpu_fp32")]
    values = [v for run in runs for v in run.values() if v == v]
    if not values or min(values) >= search.min_corr:
        return
    lowered = max(0.5, min(values) - (1.0 - search.min_corr))
    result.notes.append(f"the float file itself reaches {min(values):.4f} against the source on the GPU, below "
                        f"{search.min_corr:g}: the quantized file keeps {lowered:.4f} (the float file's, less "
                        f"{1 - search.min_corr:.3g})")
    search.min_corr = lowered


def _search(search: _Search, mode: str, ops: list[WeightOp], result: QuantizeResult) -> Outcome | None:
    first = {op: forms[0] for op, forms in MODES[mode].items() if any(w.op == op for w in ops)}
    out = search.attempt(first, final=True)
    plan, keep = first, set()
    if not out.ok and out.why.startswith("NO_GPU"):
        return out                          # nothing can be checked: no search
    if not out.ok:
        first_why = out.why
        plan, keep = _per_type(search, mode, ops, result.kept_float, result.notes)
        if not plan:
            out.why = first_why
            return out
        plan, out = _together(search, plan, keep, ops, result.kept_float)
        if not plan:
            return out
    result.forms = {w.name: plan[w.op] for w in ops if w.op in plan and w.name not in keep}
    result.kept_float.update({w.name: "its type stays float" for w in ops
                              if w.name not in result.forms and w.name not in result.kept_float})
    return out


def _write(data: bytes, dst: Path) -> None:
    """Write beside `dst` and rename onto it: a reader never sees half a model, a link at `dst` is replaced."""
    import tempfile

    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
