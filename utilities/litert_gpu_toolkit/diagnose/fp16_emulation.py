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

import numpy as np

from .report import FP16_MAX

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


def _half_twin(model, forward=None):
    """A half-precision deep copy of `forward` (default `model`) and {id(module in the copy): its path in `model`}."""
    root = forward if forward is not None else model
    twin = copy.deepcopy(root).half().eval()
    return twin, _module_paths(twin, _prefix(root, model))


def _prefix(root, model) -> str:
    """The path of `model` inside `root` plus ".", or "" (root may wrap model, e.g. a GpuRewriteWrapper)."""
    return next((f"{n}." for n, m in root.named_modules() if m is model and n), "")


def _module_paths(tree, prefix: str) -> dict:
    """{id(module under tree): its name with `prefix` taken off} -- the path in the wrapped model."""
    return {id(m): n[len(prefix):] if n.startswith(prefix) else n for n, m in tree.named_modules()}


def _half_mode(on_call=None, on_upcast=None):
    """A TorchFunctionMode that ignores the model's own upcasts to fp32 -- the GPU runs the whole graph in fp16,
    whatever the model's code asks for -- and passes every other call's (func, args, kwargs, out) to `on_call`."""
    from torch.overrides import TorchFunctionMode

    class Half(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if _upcast(func, args, kwargs):
                if on_upcast is not None:
                    on_upcast()
                return args[0]
            out = func(*args, **kwargs)
            if on_call is not None:
                on_call(func, args, kwargs, out)
            return out

    return Half()


def _half(example_inputs: Sequence) -> tuple:
    import torch

    return tuple(t.half() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in example_inputs)


def first_fp16_fault(model, example_inputs: Sequence, forward=None) -> Fp16Fault | None:
    """The first fp16 range fault of `model` on `example_inputs` (module docstring), or None when the fp16 run in
    torch stays finite or cannot run (an op without a CPU fp16 kernel). `forward`: the module to call instead of
    `model` (e.g. a GpuRewriteWrapper around it); module paths are given in `model`'s names. The caller's model is
    never changed: a deep copy is cast."""
    import torch

    twin, names = _half_twin(model, forward)
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

    def on_call(func, args, kwargs, out) -> None:
        if not found and not _finite(out) and _finite((args, kwargs)):
            found.append(_classify(func, args, kwargs, stack[-1]))

    try:
        with torch.no_grad(), _half_mode(on_call, lambda: upcasts.append(stack[-1])):
            twin(*_half(example_inputs))
    except Exception:                                 # noqa: BLE001 - no CPU fp16 kernel for some op: no answer
        pass
    finally:
        for h in handles:
            h.remove()
    if found:
        found[0].upcast_in = list(dict.fromkeys(upcasts))
    return found[0] if found else None


class Fp16Storage:
    """Torch with fp16 tensors next to torch in fp32, tapped at module boundaries (`fp16_storage`)."""

    def __init__(self, model, example_inputs: Sequence, boundaries: Sequence[str], forward=None):
        import torch

        from ..core.outputs import flat_tensors

        self.inputs = tuple(example_inputs)
        self.boundaries = list(boundaries)
        root = forward if forward is not None else model
        self._root, self._names = root, _paths(root, model)
        self.ref, handles = self._taps(root, self._names)
        try:
            with torch.no_grad():
                out = root(*self.inputs)
        finally:
            for h in handles:
                h.remove()
        self.ref[""] = flat_tensors(out)[0].detach().float()
        twin, names = _half_twin(model, forward)
        names.pop(id(twin), None)
        self.half, handles = self._taps(twin, names)
        try:
            with torch.no_grad(), _half_mode():
                self.half[""] = flat_tensors(twin(*_half(self.inputs)))[0].detach().float()
        except Exception:                             # noqa: BLE001 - no CPU fp16 kernel for some op: partial answer
            pass
        finally:
            for h in handles:
                h.remove()

    def _taps(self, root, names) -> tuple[dict, list]:
        from ..core.outputs import flat_tensors

        seen: dict = {}
        wanted = set(self.boundaries)

        def hook(mod, _inp, out):
            name = names.get(id(mod))
            tensors = flat_tensors(out)
            if name in wanted and name not in seen and tensors:
                seen[name] = tensors[0].detach().float()

        return seen, [m.register_forward_hook(hook) for m in root.modules() if names.get(id(m)) in wanted]

    def kept(self) -> dict:
        """{boundary: Comparison of its fp16 value against fp32} for every boundary the fp16 run reached."""
        from ..core.metrics import compare

        return {b: compare(self.half[b].numpy(), self.ref[b].numpy()) for b in self.boundaries
                if b in self.half and b in self.ref and self.half[b].shape == self.ref[b].shape}

    def fp16_until(self, boundary: str, value=None):
        """The model's output against fp32 when everything up to `boundary` ran in fp16 and the rest in fp32 (the
        fp32 model, with the boundary's first output replaced by an fp16 result): a precision plan cut there.
        value: that result as a GPU computed it (an array of the boundary's shape; bisect passes its fp16 tap's
        output) -- default torch16's, which is optimistic: a GPU's fp16 kernels add their own rounding. None when
        the boundary was not reached or returns more than a tensor."""
        import torch

        from ..core.metrics import compare
        from ..core.outputs import flat_tensors

        if boundary == "" and value is None:
            return self.kept().get("")
        if boundary == "":
            return compare(np.asarray(value, dtype=np.float32), self.ref[""].numpy())
        if boundary not in self.half:
            return None
        fed = self.half[boundary] if value is None else torch.as_tensor(np.asarray(value, dtype=np.float32))
        if fed.shape != self.half[boundary].shape:
            return None
        target = next((m for m in self._root.modules() if self._names.get(id(m)) == boundary), None)
        done: list = []

        def swap(_mod, _inp, out):
            if done or not isinstance(out, torch.Tensor) or out.shape != fed.shape:
                return None
            done.append(True)
            return fed.to(out.dtype)

        handle = target.register_forward_hook(swap)
        try:
            with torch.no_grad():
                out = flat_tensors(self._root(*self.inputs))[0].detach().float()
        finally:
            handle.remove()
        return compare(out.numpy(), self.ref[""].numpy()) if done else None


def _paths(root, model) -> dict:
    """{id(module under root, root itself left out): its path in `model`}."""
    names = _module_paths(root, _prefix(root, model))
    names.pop(id(root), None)
    return names


def fp16_storage(model, example_inputs: Sequence, boundaries: Sequence[str], forward=None) -> Fp16Storage:
    """How much of each boundary's value survives fp16 *storage*: torch run with fp16 tensors against torch in fp32
    at each boundary ("" = the model's first output; the first tensor a module returns on its first call, as bisect
    taps it). The fp16 run keeps every op's result in fp16 while torch's CPU kernels accumulate matmul, conv and
    norms in fp32, so it measures fp16 itself, not a GPU's accumulation order: a GPU that loses much more than this
    at a boundary loses it in its own arithmetic (split-K's case); a boundary already wrong here needs its values
    in more than fp16, which no exact fp16 rewrite gives. `.kept()` gives the comparisons; `.fp16_until(b)` what a
    precision plan with fp16 up to b and fp32 after it can reach. Upcasts in the model's own code are ignored, as
    the GPU ignores them. A boundary the fp16 run could not reach (an op without a CPU fp16 kernel) is missing."""
    return Fp16Storage(model, example_inputs, boundaries, forward)


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
    from ..core.outputs import flat_tensors

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
