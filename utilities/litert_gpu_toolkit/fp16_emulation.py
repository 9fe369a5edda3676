"""Run a model in torch with fp16 tensors and name the first op whose output turns non-finite from finite inputs.

Bisect measures *where* the GPU's fp16 output goes wrong; this says *which op and why* when the cause is a range
problem that torch reproduces: a copy of the model and its floating inputs cast to fp16 run on the CPU under a
`TorchFunctionMode` that watches every call. The first call whose output has an inf / NaN while every floating
tensor it received was finite is recomputed with those inputs in fp32:

  * the fp32 result leaves fp16's range (|x| > 65504): **overflow** -- the op's true result does not fit;
  * the fp32 result is finite and inside the range: **underflow** -- something the op needs rounds away in fp16:
    a constant below fp16's smallest subnormal (an eps of 1e-12 is 0, so 0 / max(0, eps) = NaN) or a value
    that loses its magnitude; the op is fine in exact arithmetic and wrong only in fp16.

The model's own upcasts (`.float()`, `.to(torch.float32)`: code that knows a step needs fp32, like EfficientViT's
linear attention) are ignored, as the GPU ignores them -- one fp16 graph has no fp32 ops -- and the fault says so.
What it cannot see: the GPU's own accumulation order (torch's CPU kernels accumulate half tensors in fp32 for
matmul, conv and norms), so a sum of squares that overflows inside a GPU reduction may well be finite here, and
a tensor the model creates in fp32 (`torch.ones(n)`) promotes what it touches back to fp32. A `None` result
therefore proves nothing; a fault it names is reproduced in torch, module and op included.
Rewritten models are watched as they are converted (pass the `GpuRewriteWrapper` as `forward`): the calls seen are
the rewritten ones.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

from .bisect_report import FP16_MAX

# the op a fault is named by -> the toolkit rewrite that computes it in an fp16-safe form
SAFE_FORMS = {"normalize": "l2_normalize", "norm": "patch_safe_vector_norm", "vector_norm": "patch_safe_vector_norm",
              "layer_norm": "patch_safe_layernorm", "group_norm": "patch_group_norm",
              "instance_norm": "patch_instance_norm", "softmax": "patch_safe_softmax"}


@dataclasses.dataclass
class Fp16Fault:
    """The first op whose fp16 output is non-finite from finite inputs (module docstring)."""
    op: str                 # the function's name: "normalize", "matmul", "__mul__", ...
    module: str             # the innermost module running it (a path in the model passed in; "" = top level)
    kind: str               # "overflow" or "underflow"
    fp32_peak: float        # max |result| of the same call in fp32 (nan when it could not be recomputed)
    upcast_in: list = dataclasses.field(default_factory=list)   # modules whose own code asked for fp32 (ignored)

    @property
    def rewrite(self) -> str | None:
        return SAFE_FORMS.get(self.op.strip("_"))

    def describe(self) -> str:
        where = f"{self.op} in {self.module or 'the top-level forward'}"
        own = [m for m in self.upcast_in if m == self.module or self.module.startswith(m + ".") or not m]
        note = (f" (the model's own code casts to fp32 in {own[0] or 'its forward'}: it expects fp32 arithmetic "
                "there, which one fp16 GPU graph cannot give; a precision plan can)") if own else ""
        if self.kind == "overflow":
            return (f"in torch with fp16 tensors, {where} is the first op to give inf/NaN: its result reaches "
                    f"{self.fp32_peak:.3g} in fp32, past fp16's 65504{note}")
        return (f"in torch with fp16 tensors, {where} is the first op to give inf/NaN although its fp32 result is "
                f"finite (peak {self.fp32_peak:.3g}): something it needs rounds to zero in fp16 (a constant such as "
                f"an eps below 6e-8, or a value that loses its magnitude){note}")


def first_fp16_fault(model, example_inputs: Sequence, forward=None) -> Fp16Fault | None:
    """The first fp16 range fault of `model` on `example_inputs` (module docstring), or None when the fp16 run in
    torch stays finite or cannot run (an op without a CPU fp16 kernel). `forward`: the module to call instead of
    `model` (e.g. a GpuRewriteWrapper around it); module paths are given in `model`'s names. The caller's model is
    never changed: a deep copy is cast."""
    import torch
    from torch.overrides import TorchFunctionMode

    root = forward if forward is not None else model
    prefix = next((f"{n}." for n, m in root.named_modules() if m is model and n), "")
    twin = copy.deepcopy(root).half().eval()
    names = {id(m): n[len(prefix):] if n.startswith(prefix) else n for n, m in twin.named_modules()}
    stack: list[str] = [""]
    handles = []

    def enter(mod, _args) -> None:
        stack.append(names.get(id(mod), ""))

    def leave(_mod, _args, _out) -> None:         # returns None: a hook's return value would replace the output
        stack.pop()

    for m in twin.modules():
        handles += [m.register_forward_pre_hook(enter), m.register_forward_hook(leave)]

    found: list[Fp16Fault] = []
    upcasts: list[str] = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if _upcast(func, args, kwargs):
                # the GPU runs the whole graph in fp16, whatever the model's own code asks for
                upcasts.append(stack[-1])
                return args[0]
            out = func(*args, **kwargs)
            if found:
                return out
            if not _finite(out) and _finite((args, kwargs)):
                found.append(_classify(func, args, kwargs, stack[-1]))
            return out

    half = tuple(t.half() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in example_inputs)
    try:
        with torch.no_grad(), Watch():
            twin(*half)
    except Exception:                                 # noqa: BLE001 - no CPU fp16 kernel for some op: no answer
        pass
    finally:
        for h in handles:
            h.remove()
    if found:
        found[0].upcast_in = list(dict.fromkeys(upcasts))
    return found[0] if found else None


def _upcast(func, args, kwargs) -> bool:
    """A call that turns an fp16 tensor into fp32 / fp64: .float(), .double(), .to(dtype), .type(dtype)."""
    import torch

    if not args or not isinstance(args[0], torch.Tensor) or args[0].dtype != torch.float16:
        return False
    name = getattr(func, "__name__", "")
    if name in ("float", "double"):
        return True
    wide = (torch.float32, torch.float64)
    return name in ("to", "type") and (kwargs.get("dtype") in wide or any(a in wide for a in args[1:]))


def _floats(value) -> list:
    from .outputs import flat_tensors

    return [t for t in flat_tensors(value) if t.is_floating_point() and t.numel()]


def _finite(value) -> bool:
    """Every floating tensor in `value` (nested) is free of inf / NaN."""
    import torch

    return all(bool(torch.isfinite(t).all()) for t in _floats(value))


def _to32(value):
    import torch

    if isinstance(value, torch.Tensor) and value.dtype == torch.float16:
        return value.float()
    if isinstance(value, (list, tuple)):
        return type(value)(_to32(v) for v in value)
    return value


def _classify(func, args, kwargs, module: str) -> Fp16Fault:
    name = getattr(func, "__name__", str(func))
    peak = float("nan")
    try:
        ref = func(*_to32(tuple(args)), **{k: _to32(v) for k, v in kwargs.items()})
        vals = _floats(ref)
        if vals and _finite(vals):
            peak = max(float(t.abs().max()) for t in vals)
    except Exception:                                 # noqa: BLE001 - a call that needs fp16 arguments
        pass
    kind = "overflow" if not peak <= FP16_MAX else "underflow"
    return Fp16Fault(name, module, kind, peak)
