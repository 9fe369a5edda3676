"""Bisect by intermediate: find the first block whose GPU output diverges from torch, and say why.

A model that runs fully on the GPU can still return wrong numbers. `bisect(model, example_inputs)`
exports one graph per block boundary whose *single* output is the tensor at that boundary (extra
output taps would change how the GPU fuses ops) and runs it three ways -- LiteRT's CPU runtime, the
GPU in fp16, the GPU in fp32 -- each compared with torch (correlation, SNR in dB, max error,
non-finite count, all-zero).

Boundaries ("auto"): every block in execution order -- each non-leaf member of a ModuleList /
Sequential (a transformer layer, a ResNet bottleneck, an inverted residual), without descending into
a block -- then the model's own output. A model whose containers hold only leaf layers falls back to
those layers. At most `max_boundaries`, spread evenly over the model.

Search: the output first, then a binary search for the first diverging boundary, then the rest of
the table while `budget_s` lasts; then the children of the first diverging block, to name the module
and the ops it adds to the graph.

The first diverging boundary is classified from the measurements, never from names alone:
  * conversion_error -- LiteRT's CPU runtime disagrees with torch: the converted graph is wrong;
  * miscompute -- the CPU runtime is right, the GPU is wrong in fp32 as well: a GPU kernel is wrong;
  * overflow -- fp16 non-finite / all-zero, or a sudden fp16-only drop (fp32 right): a range problem;
  * compounding -- an fp16-only error growing by a similar factor block after block;
  * degraded -- an fp16-only loss inside one block that is none of the above.
`report.rewrites` lists the toolkit rewrites that match the class and what the block contains.

    report = bisect(model, (x,)); print(report.summary())
    python -m litert_gpu_toolkit bisect my_script.py:build    # build() -> (model, example_inputs)
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .files import special_file_problem
from .metrics import Comparison, compare
from .model_info import read_model_info
from .ops import REDUCTION_OPS
from .runtime import compile_and_run

DEFAULT_MAX_BOUNDARIES = 32
_FLAT_SNR_DB = 40.0
FP16_MAX = 65504.0       # a constant tap has no correlation; below this SNR it counts as diverging


@dataclass
class BoundaryResult:
    name: str                          # module path; "" is the model's output
    fp16: Comparison | None
    fp32: Comparison | None
    status: str                       # runtime status of the fp16 run ("ok", "ops_rejected", ...)
    reductions: list[str] = field(default_factory=list)   # norm-like submodules and reduction ops in the block
    cpu: Comparison | None = None     # LiteRT's CPU runtime vs torch
    ops: list[str] = field(default_factory=list)   # op types this graph has more of than the previous boundary's
    seconds: float = 0.0
    histogram: dict = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return self.name or "<output>"

    def to_dict(self) -> dict:
        return {"name": self.label, "status": self.status, "reductions": self.reductions, "ops": self.ops,
                "seconds": round(self.seconds, 2),
                **{k: (c.to_dict() if c else None) for k, c in (("fp16", self.fp16), ("fp32", self.fp32),
                                                                ("cpu", self.cpu))}}


def diverges(cmp: Comparison | None, min_corr: float) -> bool:
    """True when a run's output is wrong: missing, non-finite, all-zero, or correlated below `min_corr`
    (a constant output, which has no correlation, by SNR instead)."""
    if cmp is None:
        return True
    if cmp.nonfinite or cmp.all_zero:
        return True
    if math.isfinite(cmp.corr):
        return cmp.corr < min_corr
    return not (cmp.snr_db >= _FLAT_SNR_DB)


@dataclass
class BisectReport:
    boundaries: list[BoundaryResult]
    first_divergent: str | None
    diagnosis: str   # overflow compounding degraded miscompute conversion_error clean not_on_gpu export_failed
    explanation: str
    min_corr: float
    module: str | None = None         # the first diverging module inside the first diverging block
    ops: list[str] = field(default_factory=list)         # the op types that module adds to the graph
    rewrites: list[str] = field(default_factory=list)    # toolkit rewrites that match the class and the block
    not_run: list[str] = field(default_factory=list)     # boundaries the time budget left out
    inside: list[BoundaryResult] = field(default_factory=list)   # the first diverging block's children

    def to_dict(self) -> dict:
        return {"boundaries": [b.to_dict() for b in self.boundaries], "first_divergent": self.first_divergent,
                "diagnosis": self.diagnosis, "explanation": self.explanation, "min_corr": self.min_corr,
                "module": self.module, "ops": self.ops, "rewrites": self.rewrites, "not_run": self.not_run,
                "inside": [b.to_dict() for b in self.inside]}

    def summary(self) -> str:
        rows = [f"{'boundary':38s} {'corr fp16':>10s} {'SNR fp16':>9s} {'SNR fp32':>9s} {'corr CPU':>9s} "
                f"{'nonfin':>6s}  new ops"]
        for b in self.boundaries:
            rows.append(_table_row(b))
        if self.not_run:
            rows.append(f"(not run within the time budget: {', '.join(self.not_run[:8])}"
                        f"{' ...' if len(self.not_run) > 8 else ''})")
        if self.inside:
            rows.append(f"inside {self.first_divergent}:")
            rows += ["  " + _table_row(b) for b in self.inside]
        rows.append(f"diagnosis: {self.diagnosis} -- {self.explanation}")
        if self.rewrites:
            rows.append(f"matching rewrites: {', '.join(self.rewrites)}")
        return "\n".join(rows)


def _table_row(b: BoundaryResult) -> str:
    f16, f32, cpu = b.fp16, b.fp32, b.cpu
    return (f"{b.label[:38]:38s} {_f(f16.corr if f16 else None):>10s} {_db(f16):>9s} {_db(f32):>9s} "
            f"{_f(cpu.corr if cpu else None):>9s} {(f16.nonfinite if f16 else '-')!s:>6s}  "
            f"{' '.join(b.ops[:6])}" + ("" if b.status == "ok" else f"  [{b.status[:80]}]"))


def _f(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.6g}"


def _db(c: Comparison | None) -> str:
    if c is None or math.isnan(c.snr_db):
        return "-"
    return "exact" if math.isinf(c.snr_db) and c.snr_db > 0 else f"{c.snr_db:.1f}"


# ------------------------------------------------------------------------------------------- boundaries

def _has_children(module) -> bool:
    return next(iter(module.children()), None) is not None


def _blocks(model) -> list[str]:
    """Non-leaf members of every ModuleList / Sequential, not descending into a block."""
    import torch.nn as nn

    found: list[str] = []

    def visit(module, prefix: str) -> None:
        container = isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) >= 2
        for name, child in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            if container and _has_children(child):
                found.append(path)
            elif _has_children(child):
                visit(child, path)

    visit(model, "")
    return found


def execution_order(model, example_inputs: Sequence, forward=None) -> tuple[dict[str, int], object]:
    """Module path -> rank at which its forward first returned, and the model's output, from one torch run."""
    import torch

    order: dict[str, int] = {}
    handles = []

    def seen(name: str):
        def hook(_m, _i, _o) -> None:          # returns None: the output is left as it is
            order.setdefault(name, len(order))
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(seen(name)))
    try:
        with torch.no_grad():
            out = (forward or model)(*example_inputs)
    finally:
        for h in handles:
            h.remove()
    return order, out


def auto_boundaries(model, example_inputs: Sequence | None = None, max_boundaries: int = DEFAULT_MAX_BOUNDARIES,
                    forward=None) -> list[str]:
    """Every block in execution order (see the module docstring), then "" for the model's output when the
    last block's output is not already it. Without example inputs: definition order, no output entry."""
    import torch.nn as nn

    names = _blocks(model)
    if not names:                           # containers of leaf layers: their layers, else the root's children
        best, best_n = None, 1
        for name, module in model.named_modules():
            if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) > best_n:
                best, best_n = name, len(module)
        names = ([f"{best}.{i}" if best else str(i) for i in range(best_n)] if best is not None
                 else [name for name, _ in model.named_children()])
    if example_inputs is not None:
        order, out = execution_order(model, example_inputs, forward)
        names = sorted((n for n in names if n in order), key=order.__getitem__)
        if names and not _is_output(model, names[-1], out, example_inputs, forward):
            names.append("")
    if len(names) > max_boundaries > 1:       # spread evenly, always keeping the last
        keep = sorted({round(i * (len(names) - 1) / (max_boundaries - 1)) for i in range(max_boundaries)})
        names = [names[i] for i in keep]
    return names


def _is_output(model, name: str, out, example_inputs, forward) -> bool:
    """Whether the first tensor of the model's output is the tensor module `name` returned."""
    from .outputs import flat_tensors

    final = flat_tensors(out)
    if not final:
        return True
    tap = _Tap(model, name, forward)
    import torch

    with torch.no_grad():
        got = tap(*example_inputs)
    return tuple(got.shape) == tuple(final[0].shape) and bool(torch.equal(got, final[0]))


def _children_in_order(model, block: str, order: dict[str, int]) -> list[str]:
    """The members of `block` worth tapping, in execution order: its children (descending through a
    single-child wrapper), then the block itself."""
    module = model.get_submodule(block)
    prefix = block
    while True:
        kids = [(n, m) for n, m in module.named_children()]
        if len(kids) != 1 or not _has_children(kids[0][1]):
            break
        prefix, module = f"{prefix}.{kids[0][0]}", kids[0][1]
    names = [f"{prefix}.{n}" for n, _ in kids if f"{prefix}.{n}" in order]
    return sorted(names, key=order.__getitem__)


class _Tap:
    """Wraps a model so its forward returns the first tensor module `boundary` returns ("" = the output).

    forward: the module to call (default `model`), e.g. a GpuRewriteWrapper around it, so the rewrites
    apply while the tap is traced."""

    def __new__(cls, model, boundary: str, forward=None):
        import torch

        from .outputs import flat_tensors

        class Tap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = forward if forward is not None else model
                self.target = model.get_submodule(boundary) if boundary else None

            def forward(self, *args):
                if self.target is None:
                    return flat_tensors(self.model(*args))[0]
                captured = []

                def hook(_mod, _inp, out):
                    tensors = flat_tensors(out)
                    if tensors:
                        captured.append(tensors[0])

                handle = self.target.register_forward_hook(hook)
                try:
                    self.model(*args)
                finally:
                    handle.remove()
                if not captured:
                    raise ValueError(f"module {boundary!r} returned no tensor")
                return captured[0]

        return Tap()


def _block_reductions(model, boundary: str, ops: set[str]) -> list[str]:
    names = []
    if boundary:
        for name, module in model.get_submodule(boundary).named_modules():
            cls = type(module).__name__
            if "norm" in cls.lower():
                names.append(f"{boundary}.{name}".rstrip(".") + f" ({cls})")
    names += sorted(f"op {o}" for o in ops & set(REDUCTION_OPS))
    return names


# ------------------------------------------------------------------------------------------- diagnosis

def _diagnose(rows: list[BoundaryResult], min_corr: float,
              facts=None) -> tuple[str | None, str, str]:
    """(first diverging boundary, class, explanation) over the rows in model order. facts(block path) -> the
    block's `_block_facts` (its peak values tell an fp16 overflow from a precision loss); None: not known."""
    failed = next((r for r in rows if r.status.startswith("export_failed")), None)
    if failed is not None:
        return (failed.label, "export_failed",
                f"the model does not convert with a tap at {failed.label} ({failed.status.partition(': ')[2]}); "
                "bisect needs a model that converts plain: fix the conversion first")
    bad_run = next((r for r in rows if r.status != "ok"), None)
    if bad_run is not None:
        return (bad_run.label, "not_on_gpu",
                f"{bad_run.label}: the graph up to here does not run GPU-only ({bad_run.status})")
    first_bad = next((r for r in rows if diverges(r.fp16, min_corr)), None)
    if first_bad is None:
        return None, "clean", f"every boundary has correlation >= {min_corr} in fp16"
    name, f16 = first_bad.label, first_bad.fp16
    cpu_wrong = first_bad.cpu is not None and diverges(first_bad.cpu, min_corr)
    f32_wrong = first_bad.fp32 is not None and diverges(first_bad.fp32, min_corr)
    if cpu_wrong:
        return (name, "conversion_error",
                f"LiteRT's CPU runtime is wrong at {name} too (corr {_f(first_bad.cpu.corr)}): the converted graph "
                "itself differs from torch -- a conversion error, not a GPU or fp16 problem")
    if f32_wrong:
        return (name, "miscompute",
                f"the GPU is wrong at {name} in fp32 as well (corr fp16 {_f(f16.corr)}, fp32 "
                f"{_f(first_bad.fp32.corr)}) while LiteRT's CPU runtime is right: the GPU computes an op of this "
                "block wrongly -- not precision")
    if f16.nonfinite or f16.all_zero:
        what = "non-finite values" if f16.nonfinite else "an all-zero output"
        red = ", ".join(first_bad.reductions) or "no norm module found; look for mean/sum/variance"
        return (name, "overflow",
                f"{what} first at {name} in fp16{'' if first_bad.fp32 is None else ' (fp32 is fine)'}: an fp16 "
                f"overflow inside this block. Reductions in it: {red}")
    errs = [max(1.0 - r.fp16.corr, 1e-9) if math.isfinite(r.fp16.corr) else 1.0 for r in rows]
    corrs = [r.fp16.corr for r in rows]
    k = rows.index(first_bad)
    jump = errs[k] / errs[k - 1] if k > 0 else float("inf")
    growing = sum(b >= a for a, b in zip(errs, errs[1:]))
    if k >= 2 and jump < 20 and growing >= 0.8 * (len(errs) - 1) and errs[k - 1] > errs[0]:
        return (name, "compounding",
                f"correlation falls steadily with depth ({_f(corrs[0])} -> {_f(corrs[-1])}, about "
                f"x{(errs[-1] / errs[0]) ** (1 / max(len(errs) - 1, 1)):.1f} error per block) in fp16 only: "
                "precision compounding across blocks")
    known = facts(first_bad.name) if facts is not None else None
    if known is not None and jump >= 20 and not known["overflow_possible"]:
        return (name, "degraded",
                f"correlation drops at {name} in fp16 only (corr {_f(f16.corr)}, SNR {_db(f16)} dB; fp32 "
                f"{_f(first_bad.fp32.corr) if first_bad.fp32 else '-'}) although no value in it comes near fp16's "
                f"range (peak |x| {known['peak']:.3g}, largest sum of squares {known['peak_square_sum']:.3g}): "
                f"precision, not overflow -- fp16 rounding of large partial results"
                + (f", e.g. its longest dot product ({known['longest_dot']} products per output) accumulated in fp16"
                   if known["longest_dot"] else ""))
    if jump >= 20 and first_bad.fp32 is not None:
        red = ", ".join(first_bad.reductions) or "none found by name; look for mean/sum/variance"
        return (name, "overflow",
                f"correlation drops at {name} in fp16 only (corr {_f(f16.corr)}, fp32 {_f(first_bad.fp32.corr)}): "
                f"a localized fp16 loss, typically a reduction saturating for some rows. Reductions in it: {red}")
    return (name, "degraded",
            f"first boundary below corr {min_corr}: {name} (corr {_f(f16.corr)}, SNR {_db(f16)} dB) in fp16 only; "
            "precision is lost inside this block")


def _block_facts(model, block: str, example_inputs: Sequence | None = None, forward=None) -> dict:
    """What a block holds that the repair rules look at: module class names, the longest dot product, whether
    it has a grouped conv, and -- with example inputs, from one torch run -- the peak |value| entering or leaving
    any of its modules and the largest sum of squares over a norm's last axis (what an fp16 reduction must hold)."""
    import torch
    import torch.nn as nn

    from .outputs import flat_tensors

    module = model.get_submodule(block) if block else model
    classes = {c.__name__ for m in module.modules() for c in type(m).__mro__}
    longest, grouped = 0, False
    for m in module.modules():
        if isinstance(m, nn.modules.conv._ConvNd):
            taps = int(np.prod(m.kernel_size))
            longest = max(longest, m.in_channels // m.groups * taps)
            grouped = grouped or (m.groups > 1 and not m.transposed)
        elif isinstance(m, nn.Linear):
            longest = max(longest, m.in_features)
    facts = {"classes": classes, "longest_dot": longest, "grouped_conv": grouped, "peak": float("nan"),
             "peak_square_sum": float("nan"), "overflow_possible": True}
    if example_inputs is None:
        return facts
    peak, squares = 0.0, 0.0

    def hook(mod, inputs, out) -> None:
        nonlocal peak, squares
        for t in flat_tensors(inputs) + flat_tensors(out):
            if t.is_floating_point() and t.numel():
                peak = max(peak, float(t.detach().abs().max()))
        if "norm" in type(mod).__name__.lower():
            for t in flat_tensors(inputs)[:1]:
                if t.is_floating_point() and t.dim():
                    squares = max(squares, float(t.detach().double().pow(2).sum(-1).max()))

    handles = [m.register_forward_hook(hook) for m in module.modules()]
    try:
        with torch.no_grad():
            (forward or model)(*example_inputs)
    finally:
        for h in handles:
            h.remove()
    facts.update(peak=peak, peak_square_sum=squares,
                 overflow_possible=peak >= FP16_MAX / 16 or squares >= FP16_MAX / 4)
    return facts


def matching_rewrites(kind: str, facts: dict, ops: Sequence[str] = ()) -> list[str]:
    """The toolkit rewrites that answer a measured class in a block with these facts (see `_block_facts`)."""
    from .rewrites.fp16_degraded import LONG_DOT_PRODUCT

    classes, out = facts["classes"], []
    if kind == "overflow":
        if any("Norm" in c and "Normal" not in c for c in classes) or {"MEAN", "RSQRT"} & set(ops):
            out += ["patch_safe_layernorm", "patch_rmsnorm"]
        if "GroupNorm" in classes:
            out.append("patch_group_norm")
        if classes & {"InstanceNorm1d", "InstanceNorm2d"}:
            out.append("patch_instance_norm")
    if kind in ("compounding", "degraded", "overflow") and facts["longest_dot"] >= LONG_DOT_PRODUCT:
        out.append("patch_split_k")
    if kind == "miscompute" and facts["grouped_conv"]:
        out.append("patch_grouped_conv")
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------------------- bisect

def bisect(
    model,
    example_inputs: Sequence,
    boundaries: str | list[str] = "auto",
    *,
    min_corr: float = 0.999,
    workdir: str | Path | None = None,
    fp32: bool = True,
    cpu: bool = True,
    progress: bool = True,
    timeout: float = 600.0,
    budget_s: float | None = None,
    refine: bool = True,
    max_boundaries: int = DEFAULT_MAX_BOUNDARIES,
    forward=None,
) -> BisectReport:
    """Tap the model at each boundary, run each tap on LiteRT's CPU and on the GPU (fp16, fp32), compare with
    torch, classify the first divergence (module docstring). budget_s: stop starting new conversions after
    this many seconds (None: no limit); the boundaries left out are listed in `not_run`. forward: the module
    to call instead of `model` (boundaries still name `model`'s submodules). The model is put in eval mode
    for the run and given back in the mode it came in."""
    import torch

    training = {name: m.training for name, m in model.named_modules()}
    model.eval()
    try:
        with torch.no_grad():
            return _bisect(model, tuple(example_inputs), boundaries, min_corr, workdir, fp32, cpu, progress,
                           timeout, budget_s, refine, max_boundaries, forward)
    finally:
        for name, m in model.named_modules():
            m.training = training.get(name, m.training)


def _bisect(model, example_inputs, boundaries, min_corr, workdir, fp32, cpu, progress, timeout, budget_s, refine,
            max_boundaries, forward) -> BisectReport:
    from .export import signature_inputs

    names = (auto_boundaries(model, example_inputs, max_boundaries, forward) if boundaries == "auto"
             else list(boundaries))
    if not names:
        raise ValueError("no boundaries: pass module names, e.g. ['encoder.layer.0', 'encoder.layer.1']")
    for n in names:
        if n:
            model.get_submodule(n)  # raises AttributeError naming the bad path
    deadline = time.monotonic() + budget_s if budget_s else math.inf
    tmp = tempfile.TemporaryDirectory(prefix="litert-bisect-") if workdir is None else None
    out_dir = Path(workdir or tmp.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(names), desc="bisect", unit="boundary")
    feed = signature_inputs(example_inputs)
    done: dict[str, BoundaryResult] = {}

    def run(name: str) -> BoundaryResult:
        if name not in done:
            done[name] = _evaluate(model, forward, name, example_inputs, feed, out_dir, fp32, cpu, timeout)
            if bar is not None:
                bar.update(1)
        return done[name]

    def time_left() -> bool:
        return time.monotonic() < deadline

    try:
        broken = False
        last = run(names[-1])
        broken = last.status.startswith("export_failed")     # every tap traces the whole model
        if not broken and (diverges(last.fp16, min_corr) or last.status != "ok"):
            lo, hi = -1, len(names) - 1                       # the first diverging boundary, assuming growth
            while hi - lo > 1 and time_left() and not broken:
                mid = (lo + hi) // 2
                r = run(names[mid])
                broken = r.status.startswith("export_failed")
                if diverges(r.fp16, min_corr) or r.status != "ok":
                    hi = mid
                else:
                    lo = mid
        for name in names:                                    # the rest of the table, budget permitting
            if broken or not time_left():
                break
            broken = run(name).status.startswith("export_failed")
        rows = [done[n] for n in names if n in done]
        _mark_new_ops(rows)
        for r in rows:
            r.reductions = _block_reductions(model, r.name, set(r.ops))
        cache: dict[str, dict] = {}

        def facts(block: str) -> dict:
            if block not in cache:
                cache[block] = _block_facts(model, block, example_inputs, forward)
            return cache[block]

        first, kind, why = _diagnose(rows, min_corr, facts)
        inside: list[BoundaryResult] = []
        module, ops = first, []
        if first is not None and kind not in ("export_failed", "not_on_gpu", "clean"):
            k = next(i for i, r in enumerate(rows) if r.label == first)
            ops = rows[k].ops
            block = rows[k].name
            if refine and block and time_left():
                order, _ = execution_order(model, example_inputs, forward)
                for sub in _children_in_order(model, block, order):
                    if not time_left():
                        break
                    r = _evaluate(model, forward, sub, example_inputs, feed, out_dir, fp32, cpu, timeout)
                    inside.append(r)
                    if r.status.startswith("export_failed") or diverges(r.fp16, min_corr):
                        break
                _mark_new_ops(([rows[k - 1]] if k > 0 else []) + inside)
                culprit = next((r for r in inside if r.status != "ok" or diverges(r.fp16, min_corr)), None)
                if culprit is not None:
                    module, ops = culprit.name, culprit.ops
            why += f". First diverging module: {module}" + (f" (ops it adds: {', '.join(ops)})" if ops else "")
        rewrites = matching_rewrites(kind, facts(model_path_of(first, rows)), ops) if first is not None else []
    finally:
        if bar is not None:
            bar.close()
        if tmp is not None:
            tmp.cleanup()
    corrs = [r.fp16.corr for r in rows if r.fp16 is not None and not math.isnan(r.fp16.corr)]
    return BisectReport(rows, first, kind, why, min(corrs) if corrs else float("nan"), module=module, ops=ops,
                        rewrites=rewrites, not_run=[n or "<output>" for n in names if n not in done], inside=inside)


def model_path_of(label: str | None, rows: list[BoundaryResult]) -> str:
    return next((r.name for r in rows if r.label == label), "")


def _mark_new_ops(rows: list[BoundaryResult]) -> None:
    """Each row's `ops`: the op types its graph has more of than the previous row's (the first row: all)."""
    prev: dict[str, int] = {}
    for r in rows:
        if r.histogram:
            r.ops = sorted(op for op, n in r.histogram.items() if n > prev.get(op, 0))
            prev = r.histogram


def _evaluate(model, forward, name, example_inputs, feed, out_dir, fp32, cpu, timeout) -> BoundaryResult:
    from .export import export_tflite

    start = time.monotonic()
    tap = _Tap(model, name, forward).eval()
    try:
        ref = tap(*example_inputs).detach().float().numpy()
        path = export_tflite(tap, example_inputs, out_dir / f"{(name or 'output').replace('.', '_')}.tflite")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - every tap traces the whole model (a sys.exit in forward
        # too): the caller stops here
        msg = " ".join(str(exc).split())[:300]
        return BoundaryResult(name, None, None, f"export_failed: {type(exc).__name__}: {msg}",
                              seconds=time.monotonic() - start)
    info = read_model_info(path)
    key = info.signatures[0].key
    hist = info.op_histogram()

    def one(accelerator: str, f32: bool) -> tuple[Comparison | None, str]:
        r = compile_and_run(path, {key: feed}, accelerator=accelerator, enforce_f32=f32, timeout=timeout)
        return (compare(next(iter(r.outputs[key].values())), ref) if r.ok else None), r.status

    c16, status = one("gpu", False)
    c32 = one("gpu", True)[0] if fp32 and status == "ok" else None
    ccpu = one("cpu", False)[0] if cpu else None
    return BoundaryResult(name, c16, c32, status, cpu=ccpu, seconds=time.monotonic() - start, histogram=hist)


class BuilderError(ValueError):
    """The SCRIPT.py:FUNCTION given to the bisect command cannot be loaded or called (the message says why)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .arguments import JSON_OUTPUT_HELP, add_verbose_argument, correlation

    p.add_argument("builder", help="SCRIPT.py:FUNCTION -- FUNCTION() returns (model, example_inputs_tuple)")
    p.add_argument("--boundaries", help="comma-separated module names (default: auto = every block in execution "
                                        "order, then the output)")
    p.add_argument("--min-corr", type=correlation, default=0.999, help="divergence threshold in (0, 1] (default 0.999)")
    p.add_argument("--no-fp32", action="store_true", help="skip the fp32 GPU runs (then a GPU miscompute reads as "
                                                           "fp16 loss)")
    p.add_argument("--no-cpu", action="store_true", help="skip LiteRT's CPU runs (then a conversion error reads "
                                                          "as a GPU problem)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop starting conversions after this long; the table lists what was left out")
    p.add_argument("--max-boundaries", type=int, default=DEFAULT_MAX_BOUNDARIES,
                   help=f"auto boundaries spread over the model (default {DEFAULT_MAX_BOUNDARIES})")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON; " + JSON_OUTPUT_HELP)
    add_verbose_argument(p)


def load_builder(spec_text: str):
    """(model, example_inputs tuple) from `SCRIPT.py:FUNCTION`; `BuilderError` for every way that can fail."""
    import traceback

    script, sep, func = spec_text.rpartition(":")
    if not sep or not script or not func.isidentifier():
        raise BuilderError(f"give SCRIPT.py:FUNCTION, got {spec_text!r}")
    path = Path(script)
    special = special_file_problem(path)
    if special:                         # a FIFO would block the import forever
        raise BuilderError(f"{special}, not a Python script")
    if not path.is_file():
        raise BuilderError(f"{script}: no such script")
    spec = importlib.util.spec_from_file_location("bisect_builder", path)
    if spec is None or spec.loader is None:
        raise BuilderError(f"{script}: not a Python script")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise BuilderError(f"{script}, line {exc.lineno}: syntax error: {exc.msg}") from None
    except SystemExit as exc:  # its exit status is not bisect's: a 0 would read as "every boundary clean"
        raise BuilderError(f"{script} called sys.exit({exc.code!r}) while loading; bisect needs a script that "
                           "defines the builder without exiting") from None
    except Exception as exc:  # noqa: BLE001 - the user's script raised while importing: show where, briefly
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise BuilderError(
            f"{script} raised {type(exc).__name__} while loading ({where.filename}, line {where.lineno}): {exc}"
        ) from None
    builder = getattr(module, func, None)
    if builder is None:
        found = sorted(
            n
            for n, v in vars(module).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == "bisect_builder"
        )
        raise BuilderError(f"{script} has no function {func!r}; it defines: {', '.join(found) or 'none'}")
    if not callable(builder):
        raise BuilderError(f"{script}:{func} is not a function")
    try:
        built = builder()
    except SystemExit as exc:
        raise BuilderError(f"{script}:{func}() called sys.exit({exc.code!r}) instead of returning "
                           "(model, example_inputs)") from None
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise BuilderError(
            f"{script}:{func}() raised {type(exc).__name__} ({where.filename}, line {where.lineno}): {exc}"
        ) from None
    if not (isinstance(built, (tuple, list)) and len(built) == 2):
        raise BuilderError(f"{script}:{func}() must return (model, example_inputs), got {type(built).__name__}")
    model, example = built
    import torch

    if not isinstance(model, torch.nn.Module):
        raise BuilderError(f"{script}:{func}() returned a {type(model).__name__} as the model, not a torch.nn.Module")
    example = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    if not example or not all(isinstance(x, torch.Tensor) for x in example):
        raise BuilderError(f"{script}:{func}() must return example inputs as a tuple of tensors")
    return model, example


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every boundary is clean, 1 when one diverges, 2 on bad arguments or a bad builder."""
    import json
    import sys

    from .arguments import refuse_output_path, write_output

    if refuse_output_path("--json", args.json, inputs=(args.builder.rpartition(":")[0],)):
        return 2
    try:
        model, example = load_builder(args.builder)
        bounds = [b.strip() for b in args.boundaries.split(",") if b.strip()] if args.boundaries else "auto"
        if bounds != "auto":
            missing = [b for b in bounds if not _has_submodule(model, b)]
            if missing:
                raise BuilderError(
                    f"no such module(s) in the model: {', '.join(missing)}; top-level children: "
                    + ", ".join(n for n, _ in model.named_children())
                )
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.budget is not None and not args.budget > 0 or args.max_boundaries < 2:
        print("error: --budget must be > 0 seconds and --max-boundaries >= 2", file=sys.stderr)
        return 2
    report = bisect(model, example, bounds, min_corr=args.min_corr, fp32=not args.no_fp32, cpu=not args.no_cpu,
                    budget_s=args.budget, max_boundaries=args.max_boundaries)
    print(report.summary())
    if args.json:
        problem = write_output(args.json, json.dumps(report.to_dict(), indent=1, default=float))
        if problem:
            print(f"error: {problem}", file=sys.stderr)
    return 0 if report.diagnosis == "clean" else 1


def _has_submodule(model, name: str) -> bool:
    try:
        model.get_submodule(name)
        return True
    except AttributeError:
        return False


def as_numpy(x) -> np.ndarray:
    return np.asarray(x)
