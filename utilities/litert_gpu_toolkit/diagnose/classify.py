"""What a diverging boundary means: its class from the CPU / fp16 / fp32 measurements and the block's torch ranges
(`_diagnose`), what the block holds (`_block_facts`), and the rewrites that answer it (`matching_rewrites`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from .report import FP16_MAX, BoundaryResult, _db, _f, diverges
from .fp16_emulation import fp16_storage
from ..core.ops import REDUCTION_OPS


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

def fault_in_block(found, block: str) -> bool:
    """An `fp16_emulation.Fp16Fault` that lies in module `block` ("": the whole model) -- the only kind the
    diagnosis takes as the reason for that block's divergence."""
    return found is not None and (not block or found.module == block or found.module.startswith(block + "."))


def _diagnose(rows: list[BoundaryResult], min_corr: float,
              facts=None, fault=None) -> tuple[str | None, str, str]:
    """(first diverging boundary, class, explanation) over the rows in model order. facts(block path) -> the
    block's `_block_facts` (its peak values tell an fp16 overflow from a precision loss); None: not known.
    fault() -> the model's first fp16 range fault reproduced in torch (`fp16_emulation.first_fp16_fault`) or None;
    asked only for an fp16-only divergence, and used when it lies inside the diverging block."""
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
    found = fault() if fault is not None else None
    if fault_in_block(found, first_bad.name):
        what = ("non-finite values" if f16.nonfinite else "an all-zero output" if f16.all_zero
                else f"corr {_f(f16.corr)}, SNR {_db(f16)} dB")
        return (name, found.kind,
                f"{what} at {name} in fp16 only{'' if first_bad.fp32 is None else ' (fp32 is fine)'}; "
                f"{found.describe()}")
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


def add_storage(model, example_inputs, forward, rows: list[BoundaryResult]):
    """Fill each row's `torch16` (`fp16_emulation.fp16_storage`: two torch runs, no conversion); returns
    until(boundary) -> the output's Comparison when the GPU's fp16 value at that boundary (its tap's output; torch16's
    where the tap did not run) is fed to the rest of the model in fp32 -- a precision plan cut there, simulated with
    the GPU's own fp16 prefix. None when the measurement could not run."""
    if not rows:
        return None
    try:
        storage = fp16_storage(model, example_inputs, [r.name for r in rows], forward)
        kept = storage.kept()
    except Exception:                         # noqa: BLE001 - a measurement that cannot run leaves the column empty
        return None
    for r in rows:
        r.torch16 = kept.get(r.name)
    gpu = {r.name: r.fp16_value for r in rows}
    return lambda boundary: storage.fp16_until(boundary, gpu.get(boundary))


def storage_note(rows: list[BoundaryResult], first: str | None, kind: str, min_corr: float,
                 until=None) -> tuple[bool | None, str]:
    """(does the output need more than fp16 storage?, a sentence for the explanation) from the rows' `torch16`
    (torch with fp16 tensors vs fp32). Only for a precision class (compounding, degraded): a range fault is a
    rewrite's job whatever storage keeps. until(boundary) -> the output's Comparison when the model runs fp16 up to
    that boundary and fp32 after it (`add_storage`): it picks the latest cut for a precision plan, searching the
    boundaries before the first loss (a later cut keeps more fp16, so loses more). (None, "") when not measured."""
    if first is None or kind not in ("compounding", "degraded"):
        return None, ""
    by_label = {r.label: r for r in rows}
    out = by_label.get("<output>") or rows[-1]
    head = by_label.get(first)
    if out.torch16 is None or head is None or head.torch16 is None:
        return None, ""
    here = f"torch with fp16 tensors (every result stored in fp16, fp32 accumulation) keeps corr " \
           f"{_f(head.torch16.corr)} at {first} and {_f(out.torch16.corr)} at {out.label}"
    if not diverges(out.torch16, min_corr):
        from ..rewrites.fp16_degraded import LONG_DOT_PRODUCT

        return False, (f". {here}: the GPU loses more than fp16 storage does, in its own arithmetic (accumulation "
                       "order inside its kernels) -- only a rewrite of that arithmetic wins it back, where one "
                       f"applies (split-K for a dot product of >= {LONG_DOT_PRODUCT} products)")
    lost = next(i for i, r in enumerate(rows) if r.torch16 is not None and diverges(r.torch16, min_corr))
    why = (f". {here}: the values this model needs do not survive fp16 storage (torch16 first below {min_corr} at "
           f"{rows[lost].label}) -- the loss is in fp16 itself, not in how the GPU computes, so no exact fp16 rewrite "
           "removes it")
    k = min(lost, rows.index(head))                  # fp16 only where both the GPU and storage still hold
    if until is None or k == 0:
        return True, why + ". Keep the model in fp32 from its start (enforce_f32), or measure a precision plan"
    lo, hi, best = 0, k - 1, None                    # the latest cut whose fp16 prefix the output survives
    while lo <= hi:
        mid = (lo + hi) // 2
        got = until(rows[mid].name)
        if got is not None and not diverges(got, min_corr):
            best, lo = (rows[mid].name, got), mid + 1
        else:
            hi = mid - 1
    if best is not None:
        return True, (why + f". A precision plan can: the GPU's fp16 output at {best[0]} fed to the rest of the model "
                      f"in fp32 gives corr {_f(best[1].corr)} at the output -- plan_precision(model, inputs, "
                      f"cuts=[{best[0]!r}], fp32=[1]) (measure the chain with plan.measure)")
    early = until(rows[0].name)
    return True, (why + f". Not even a precision plan helps: the GPU's fp16 output at {rows[0].label} fed to the rest "
                  f"in fp32 gives corr {_f(early.corr) if early is not None else '-'} at the output -- the output is "
                  "that sensitive to rounding anywhere; compile the model fp32 (enforce_f32)")


def _block_facts(model, block: str, example_inputs: Sequence | None = None, forward=None) -> dict:
    """What a block holds that the repair rules look at: module class names, the longest dot product, whether
    it has a grouped conv, and -- with example inputs, from one torch run -- the peak |value| entering or leaving
    any of its modules and the largest sum of squares over a norm's last axis (what an fp16 reduction must hold)."""
    import torch
    import torch.nn as nn

    from ..core.outputs import flat_tensors

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


_ELEMENTWISE = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE"}


def constant_operand_nodes(path) -> list[str]:
    """The nodes of a .tflite that match the GPU's known elementwise miscompute (`rewrites.constant_operand`, each
    form measured wrong in fp32 too): a binary elementwise op with one constant operand of rank >= 2 that spans more
    than its last axis, whose output has rank 2 or 3 and whose constant fills the first axis or whose runtime
    operand has a lower rank; or whose output has rank 4 with the runtime operand broadcast over a first axis the
    constant fills. Each as "OP [runtime shape] x [constant shape]" (no index: a caller compares two graphs)."""
    from ..core.model_info import read_model_info

    info = read_model_info(path)
    found = []
    for op in info.ops:
        if op.op not in _ELEMENTWISE or len([i for i in op.inputs if i >= 0]) != 2:
            continue
        a, b = (info.tensor(i, op.subgraph) for i in op.inputs[:2])
        if a.is_constant == b.is_constant:
            continue
        const, runtime = (a, b) if a.is_constant else (b, a)
        out = info.tensor(op.outputs[0], op.subgraph).shape
        if len(const.shape) < 2 or int(np.prod(const.shape)) <= int(const.shape[-1]):
            continue
        c0 = ((1,) * (len(out) - len(const.shape)) + tuple(const.shape))[0]
        r0 = ((1,) * (len(out) - len(runtime.shape)) + tuple(runtime.shape))[0]
        low = len(out) in (2, 3) and (c0 > 1 or len(runtime.shape) < len(out))
        batch = len(out) == 4 and c0 > 1 and r0 == 1
        if low or batch:
            found.append(f"{op.op} {list(runtime.shape)} x {list(const.shape)}")
    return found


def matching_rewrites(kind: str, facts: dict, ops: Sequence[str] = ()) -> list[str]:
    """The toolkit rewrites that answer a measured class in a block with these facts (see `_block_facts`)."""
    from ..rewrites.fp16_degraded import LONG_DOT_PRODUCT

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


def _new_miscompute_nodes(out_dir: Path, tap: str, before: str | None) -> list[str]:
    """`constant_operand_nodes` of the tap at `tap` less those already in the (right) tap at `before`."""
    from collections import Counter

    def nodes(name):
        path = out_dir / f"{(name or 'output').replace('.', '_')}.tflite"
        try:
            return Counter(constant_operand_nodes(path)) if path.is_file() else Counter()
        except Exception:                             # noqa: BLE001 - an unreadable tap: nothing to add
            return Counter()
    return list((nodes(tap) - (nodes(before) if before is not None else Counter())).elements())
