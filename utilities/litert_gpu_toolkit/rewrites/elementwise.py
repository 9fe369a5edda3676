"""Element-wise and shape walls: SELECT, BROADCAST_TO, RELU_0_TO_1, amax, SPLIT, Linear channel attention,
identical / all-constant inputs.

Each rewrite has two spellings that share one implementation:
  * a module patch `patch_*(model)` that replaces module instances (nn.ELU, nn.PReLU, nn.Hardsigmoid,
    nn.Hardtanh(0, 1), nn.Linear fed a rank-4 tensor) and, unless `functional=False`, scopes the
    functional handler of the same name on `model.forward` (see `scope_rewrites`);
  * a functional handler of the same name (`rewrites.functional.register_handler`) for torch.where,
    Tensor.masked_fill, boolean-mask assignment, Tensor.expand, torch.amax, Tensor.chunk, F.softmax, ...
    It is active only inside `GpuRewriteWrapper` / `convert_for_gpu` / a scoped forward.

What the converter emits here (litert-torch 0.10.0, ai-edge-litert 2.3.0, llvmpipe GPU) decides what each
test proves; walls that this toolchain no longer shows are listed in the toolkit README, and their
tests pin the current lowering instead (see each function).
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register, set_submodule
from .functional import GpuRewriteMode, register_handler
# One implementation of "make a constant operand a runtime input" lives in rewrites.state; the
# identical / all-constant input wall uses it too, so it is re-exported here.
from .state import ConstantToInput, constant_to_input

__all__ = [
    "arith_where", "patch_select", "ELUArith", "PReLUArith",
    "repeat_kv_cat", "expand_by_cat", "patch_repeat_kv", "patch_broadcast_to",
    "clamp01", "hardsigmoid_arith", "HardsigmoidArith", "Clamp01", "patch_hardsigmoid",
    "channel_max", "patch_amax", "chunk_slices", "split_slices", "patch_chunk",
    "LinearAsConv1x1", "patch_channel_attention_linear",
    "patch_degenerate_softmax", "constant_to_input", "ConstantToInput",
    "scope_rewrites", "scoped_rewrites",
]


# ------------------------------------------------------------------------------------- scoping

_SCOPE_ATTR = "_gpu_rewrite_names"       # set of handler names scoped on a module
_MODE_ATTR = "_gpu_rewrite_modes"        # stack of active modes (re-entrant forwards)


def _enter_scope(module, args, kwargs=None):
    mode = GpuRewriteMode(include=sorted(getattr(module, _SCOPE_ATTR)))
    module.__dict__.setdefault(_MODE_ATTR, []).append(mode)
    mode.__enter__()


def _exit_scope(module, args, *rest):
    stack = module.__dict__.get(_MODE_ATTR)
    if stack:
        stack.pop().__exit__(None, None, None)


def scope_rewrites(model: nn.Module, names: Sequence[str]) -> Change:
    """Run `model`'s forward with the named functional handlers active; no global state.

    A forward pre-hook enters a `GpuRewriteMode` and a forward hook (always called, also when the
    forward raises) leaves it, so the scope is active only while this model runs -- including while
    torch.export / litert_torch.convert trace it -- and survives copy.deepcopy (the hooks read the
    names from the module they are called on). Calling it again adds names to the same scope.
    """
    if hasattr(model, _SCOPE_ATTR):
        getattr(model, _SCOPE_ATTR).update(names)
    else:
        model.__dict__[_SCOPE_ATTR] = set(names)
        model.register_forward_pre_hook(_enter_scope)
        model.register_forward_hook(_exit_scope, always_call=True)
    return Change("", f"functional rewrites {', '.join(sorted(names))} scoped on {type(model).__name__}.forward",
                  ",".join(sorted(names)), True)


def scoped_rewrites(model: nn.Module) -> set[str]:
    """The functional handler names `scope_rewrites` put on `model` (empty when none)."""
    return set(getattr(model, _SCOPE_ATTR, ()))


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def _scalar_value(v):
    """A Python number for numbers and 1-element tensors that are not being traced, else None."""
    if _is_number(v):
        return float(v)
    return None


# -------------------------------------------------------------------------------------- SELECT

def _branch_term(value, sel: torch.Tensor, lsel_off: torch.Tensor | None, nonfinite: str):
    """The contribution of one where-branch: `value` where sel == 1, (+/-)0 where sel == 0."""
    c = _scalar_value(value)
    if c is not None:
        if math.isnan(c):
            return None
        if math.isinf(c):            # -log(1 - sel) is +inf where sel == 1 and 0 where sel == 0
            off = torch.log(1 - sel) if lsel_off is None else lsel_off
            return -off if c > 0 else off
        return None if c == 0 else sel * c
    if nonfinite == "finite":
        return value * sel
    off = torch.log(1 - sel) if lsel_off is None else lsel_off   # -inf where selected, 0 elsewhere
    return torch.clamp(value, min=off, max=-off)


def arith_where(cond: torch.Tensor, a, b, *, nonfinite: str = "exact") -> torch.Tensor:
    """torch.where(cond, a, b) without SELECT / SELECT_V2: arithmetic on the mask m = cond.float().

    nonfinite="exact" (default): each runtime branch t is kept with clamp(t, -e, e), e = -log(1 - sel),
    which is +inf where the branch is selected and 0 where it is not. The result is then t + 0 where
    selected -- exact for every finite value and for +/-inf -- and an inf in the *unused* branch
    becomes 0 instead of the NaN a plain blend gives (0 * inf). Constant branches cost less: a finite
    constant c is c * sel, +/-inf is +/-(-log(1 - sel)) (the usual -inf attention mask is log(m)).
    NaN in the unused branch: clamp propagates NaN in torch, so the output is NaN there (a NaN cannot
    be removed by arithmetic); on the GPU, MAXIMUM/MINIMUM of NaN is device-defined (llvmpipe returns
    the other operand). Zeros keep their value but may lose their sign (-0 + 0 = +0).
    nonfinite="finite": the plain blend a*m + b*(1-m) (fewer ops); exact only when both branches are finite.
    Dtype follows torch.where; integer/bool branches are not supported (the GPU runs float only).
    """
    if nonfinite not in ("exact", "finite"):
        raise ValueError("nonfinite must be 'exact' or 'finite'")
    tensors = [t for t in (a, b) if isinstance(t, torch.Tensor)]
    dtype = torch.result_type(a, b) if tensors else torch.get_default_dtype()
    if not dtype.is_floating_point:
        raise TypeError(f"arith_where supports floating branches only, got {dtype}")
    if cond.dtype != torch.bool:
        cond = cond != 0
    m = cond.to(dtype)
    a = a.to(dtype) if isinstance(a, torch.Tensor) else a
    b = b.to(dtype) if isinstance(b, torch.Tensor) else b
    log_m = torch.log(m) if nonfinite == "exact" or any(_scalar_value(v) is not None and math.isinf(_scalar_value(v))
                                                       for v in (a, b)) else None
    log_1m = torch.log(1 - m) if log_m is not None else None
    ta = _branch_term(a, m, log_1m, nonfinite)      # a is selected where m == 1
    tb = _branch_term(b, 1 - m, log_m, nonfinite)   # b is selected where m == 0
    if (ta is None and _scalar_value(a) is not None and math.isnan(_scalar_value(a))) or \
            (tb is None and _scalar_value(b) is not None and math.isnan(_scalar_value(b))):
        raise ValueError("a NaN constant branch cannot be expressed without SELECT")
    # every term carries the mask's shape and its branch's shape, so the sum has torch.where's shape
    terms = [t for t in (ta, tb) if t is not None]
    if not terms:
        return m * 0.0
    return terms[0] + terms[1] if len(terms) == 2 else terms[0]


class ELUArith(nn.Module):
    """ELU / CELU / SELU without SELECT: scale * (relu(x) + alpha * expm1(min(x, 0) / beta)).

    Exact to fp32 rounding (<= 2 ulp of alpha * scale absolute) for every input, inf included: the
    exponential never sees a positive argument, so no branch overflows.
    """

    def __init__(self, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.scale, self.input_scale, self.inplace = float(alpha), float(scale), float(input_scale), inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        neg = -torch.relu(-x)
        if self.input_scale != 1.0:
            neg = neg * self.input_scale
        y = torch.relu(x) + self.alpha * torch.expm1(neg)
        if self.scale != 1.0:
            y = y * self.scale
        return x.copy_(y) if self.inplace else y


class PReLUArith(nn.Module):
    """PReLU as relu(x) - w * relu(-x) (per channel on dim 1): exact (one rounding, like PReLU itself)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=weight.requires_grad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if w.numel() > 1:
            w = w.reshape(-1, *([1] * (x.dim() - 2))) if x.dim() >= 2 else w
        return torch.relu(x) - w * torch.relu(-x)


def _select_module(m: nn.Module):
    if type(m) is nn.ELU:
        return ELUArith(m.alpha, inplace=m.inplace), f"ELU(alpha={m.alpha}) -> relu + expm1(min(x,0))"
    if type(m) is nn.CELU:
        return ELUArith(m.alpha, input_scale=1.0 / m.alpha, inplace=m.inplace), f"CELU({m.alpha}) -> arithmetic"
    if type(m) is nn.SELU:
        return (ELUArith(1.6732632423543772, scale=1.0507009873554805, inplace=m.inplace), "SELU -> arithmetic")
    if type(m) is nn.PReLU:
        return PReLUArith(m.weight), f"PReLU({m.num_parameters}) -> relu(x) - w*relu(-x)"
    return None


def _replace_modules(model: nn.Module, pick: Callable, rewrite: str) -> list[Change]:
    changes = []
    for path, m in list(model.named_modules()):
        if not path:
            continue
        found = pick(m)
        if found is not None:
            new, what = found
            new.train(m.training)
            set_submodule(model, path, new)
            changes.append(Change(path, what, rewrite, True))
    return changes


@register("patch_select", wall="select")
def patch_select(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """SELECT / SELECT_V2 sources -> arithmetic (wall `select`).

    Modules: ELU, CELU, SELU -> relu + expm1 of min(x, 0); PReLU -> relu(x) - w*relu(-x) (this converter
    already lowers PReLU without SELECT; the rewrite keeps it so). Functional: torch.where / Tensor.where,
    masked_fill(_), boolean-mask assignment (`x[mask] = v`, `index_put_` with a bool mask), F.elu / celu /
    selu / prelu -> `arith_where` / the module forms. Exactness: see `arith_where` (exact for finite and
    +/-inf values in either branch; NaN in the unused branch propagates).
    """
    changes = _replace_modules(model, _select_module, "patch_select")
    if functional:
        changes.append(scope_rewrites(model, ["patch_select"]))
    return changes


def _where_handler(cond, input=None, other=None, *, out=None):
    if input is None or other is None or out is not None or not isinstance(cond, torch.Tensor):
        return NotImplemented
    try:
        return arith_where(cond, input, other)
    except (TypeError, ValueError):
        return NotImplemented


register_handler(torch.where, "patch_select")(_where_handler)


@register_handler(torch.Tensor.where, "patch_select")
def _tensor_where(self, condition, y):
    return _where_handler(condition, self, y)


def _mask_for(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """A boolean mask over a prefix of `self`'s dims, reshaped to broadcast against `self`."""
    if mask.dtype != torch.bool or mask.dim() > self.dim():
        return None
    if tuple(mask.shape) == tuple(self.shape[:mask.dim()]):
        return mask.reshape(*mask.shape, *([1] * (self.dim() - mask.dim())))
    try:
        torch.broadcast_shapes(mask.shape, self.shape)
    except RuntimeError:
        return None
    return mask


def _fill_value(value):
    if _is_number(value) or isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor):
        return value
    return None


@register_handler(torch.Tensor.masked_fill, "patch_select")
@register_handler(torch.masked_fill, "patch_select")
def _masked_fill(self, mask, value):
    if not self.dtype.is_floating_point or not isinstance(mask, torch.Tensor):
        return NotImplemented
    try:
        torch.broadcast_shapes(mask.shape, self.shape)
        return arith_where(mask, _fill_value(value), self)
    except (TypeError, ValueError, RuntimeError):
        return NotImplemented


@register_handler(torch.Tensor.masked_fill_, "patch_select")
def _masked_fill_(self, mask, value):
    new = _masked_fill(self, mask, value)
    return NotImplemented if new is NotImplemented else self.copy_(new)


@register_handler(torch.Tensor.__setitem__, "patch_select")
def _setitem(self, key, value):
    """`x[mask] = v` with a boolean mask (over all dims or a prefix) -> x.copy_(where(mask, v, x))."""
    if not isinstance(key, torch.Tensor) or key.dtype != torch.bool or not self.dtype.is_floating_point:
        return NotImplemented
    mask = _mask_for(self, key)
    v = _fill_value(value)
    if mask is None or v is None:
        return NotImplemented
    if isinstance(v, torch.Tensor) and v.numel() != 1:
        try:                                          # per-row values broadcast over the masked prefix
            torch.broadcast_shapes(v.shape, self.shape[key.dim():])
        except RuntimeError:
            return NotImplemented
    elif isinstance(v, torch.Tensor):
        v = v.reshape(())
    try:
        self.copy_(arith_where(mask, v, self))
    except (TypeError, ValueError):
        return NotImplemented
    return None


@register_handler(torch.Tensor.index_put_, "patch_select")
@register_handler(torch.Tensor.index_put, "patch_select")
def _index_put(self, indices, values, accumulate=False):
    if accumulate or len(indices) != 1 or not isinstance(indices[0], torch.Tensor) or indices[0].dtype != torch.bool:
        return NotImplemented
    out = self.clone()
    done = _setitem(out, indices[0], values)
    return NotImplemented if done is NotImplemented else out


def _elu_like(alpha, scale, input_scale):
    def handler(input, *args, inplace=False, **kwargs):
        a = args[0] if args else kwargs.get("alpha", alpha)
        inplace = args[1] if len(args) > 1 else inplace
        if not input.dtype.is_floating_point:
            return NotImplemented
        return ELUArith(a, scale, (1.0 / a) if input_scale is None else input_scale, inplace)(input)
    return handler


register_handler(F.elu, "patch_select")(_elu_like(1.0, 1.0, 1.0))
register_handler(F.celu, "patch_select")(_elu_like(1.0, 1.0, None))


@register_handler(F.selu, "patch_select")
def _selu(input, inplace=False):
    return ELUArith(1.6732632423543772, 1.0507009873554805, 1.0, inplace)(input)


@register_handler(F.prelu, "patch_select")
def _prelu(input, weight):
    w = weight.reshape(-1, *([1] * (input.dim() - 2))) if weight.numel() > 1 and input.dim() >= 2 else weight
    return torch.relu(input) - w * torch.relu(-input)


# --------------------------------------------------------------------------------- BROADCAST_TO

def _tile(x: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    """n copies of x along `dim` with CONCATENATION only (doubling above 16 copies)."""
    if n <= 16:
        return torch.cat([x] * n, dim)
    y = x
    while y.shape[dim] * 2 <= n * x.shape[dim]:
        y = torch.cat([y, y], dim)
    rest = n * x.shape[dim] - y.shape[dim]
    return torch.cat([y, y.narrow(dim, 0, rest)], dim) if rest else y


def repeat_kv_cat(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """GQA repeat_kv without BROADCAST_TO or a rank-5 tensor: [b, n_kv, s, d] -> [b, n_kv * n_rep, s, d].

    Head i of the input fills output heads i*n_rep .. (i+1)*n_rep - 1 (the order of HF's repeat_kv and of
    repeat_interleave on dim 1). SLICE + one CONCATENATION; bit-exact (copies only).
    """
    if n_rep == 1:
        return x
    return torch.cat([x[:, i:i + 1] for i in range(x.shape[1]) for _ in range(n_rep)], dim=1)


def _target_shape(x: torch.Tensor, sizes) -> tuple[int, ...] | None:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    if not all(isinstance(s, int) for s in sizes) or len(sizes) < x.dim():
        return None
    lead = len(sizes) - x.dim()
    out = []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                return None
            out.append(s)
        else:
            have = x.shape[i - lead]
            out.append(have if s == -1 else s)
            if have != 1 and out[-1] != have:
                return None
    return tuple(out)


def expand_by_cat(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """x.expand(shape) as copies joined by CONCATENATION (no BROADCAST_TO). Bit-exact.

    A constant (parameter / buffer) expand folds into a constant at the target shape -- the 'baked'
    form; a runtime tensor becomes concatenations (log2(n) of them above 16 copies).
    """
    shape = tuple(shape)
    if x.dim() < len(shape):
        x = x.reshape((1,) * (len(shape) - x.dim()) + tuple(x.shape))
    for dim, (have, want) in enumerate(zip(x.shape, shape)):
        if have == 1 and want != 1:
            x = _tile(x, want, dim)
    return x


@register_handler(torch.Tensor.expand, "patch_repeat_kv")
def _expand_repeat_kv(self, *sizes, **kwargs):
    """The rank-5 GQA idiom x[:, :, None].expand(b, k, n, s, d): copy at rank 4, then view back (folds away)."""
    shape = _target_shape(self, sizes)
    if shape is None or self.dim() != 5 or len(shape) != 5:
        return NotImplemented
    grown = [i for i, (h, w) in enumerate(zip(self.shape, shape)) if h != w]
    if len(grown) != 1:
        return NotImplemented
    a, n = grown[0], shape[grown[0]]
    x4 = self.squeeze(a)
    if a == 0:
        y = _tile(x4, n, 0)
    else:
        y = torch.cat([x4.narrow(a - 1, i, 1) for i in range(x4.shape[a - 1]) for _ in range(n)], a - 1)
    return y.reshape(shape)


@register_handler(torch.Tensor.expand, "patch_broadcast_to")
def _expand(self, *sizes, **kwargs):
    shape = _target_shape(self, sizes)
    if shape is None:
        return NotImplemented
    return expand_by_cat(self, shape)


@register_handler(torch.Tensor.expand_as, "patch_broadcast_to")
def _expand_as(self, other):
    return expand_by_cat(self, other.shape)


@register_handler(torch.broadcast_to, "patch_broadcast_to")
@register_handler(torch.Tensor.broadcast_to, "patch_broadcast_to")
def _broadcast_to(self, size):
    shape = _target_shape(self, (tuple(size),))
    return NotImplemented if shape is None else expand_by_cat(self, shape)


@register_handler(torch.Tensor.repeat_interleave, "patch_repeat_kv")
@register_handler(torch.repeat_interleave, "patch_repeat_kv")
def _repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    if not isinstance(input, torch.Tensor) or not isinstance(repeats, int) or dim is None or input.dim() > 4 \
            or input.shape[dim] * repeats > 256:
        return NotImplemented
    dim = dim % input.dim()
    return torch.cat([input.narrow(dim, i, 1) for i in range(input.shape[dim]) for _ in range(repeats)], dim)


@register("patch_repeat_kv", wall="broadcast_to")
def patch_repeat_kv(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """GQA repeat_kv (x[:, :, None].expand(...).reshape(...), repeat_interleave on heads) -> `repeat_kv_cat`.

    Removes BROADCAST_TO (runtime expand, rejected by the GPU even at rank 4; LiteRT#9191) and the rank-5
    tensor in one go. Bit-exact, same head order. Functional only: scopes the handler on `model.forward`.
    """
    return [scope_rewrites(model, ["patch_repeat_kv"])] if functional else []


@register("patch_broadcast_to", wall="broadcast_to")
def patch_broadcast_to(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """Tensor.expand / expand_as / broadcast_to -> copies by CONCATENATION (`expand_by_cat`). Bit-exact.

    On a parameter or buffer the copies fold into one constant at the target shape (a baked constant);
    on a runtime tensor they are SLICE-free concatenations. Functional only: scopes the handler.
    """
    return [scope_rewrites(model, ["patch_broadcast_to"])] if functional else []


# -------------------------------------------------------------------------------- RELU_0_TO_1

def clamp01(x: torch.Tensor) -> torch.Tensor:
    """clamp(x, 0, 1) without RELU_0_TO_1: y = min(x, 2); relu(y) - relu(y - 1) -> MINIMUM, SUB, RELU, SUB.

    Bit-exact for every input, inf included: y - 1 is exact for y in [1, 2] (Sterbenz), and y < 1 gives
    relu(y) - 0. The spec's plain relu(x) - relu(x - 1) is exact only while x - 1 is exact (|x| < 2**24
    in fp32, |x| < 2048 on an fp16 GPU -- above that it returns 0 or 2 instead of 1); the min(x, 2) in
    front removes that limit. The converter folds min(relu(x), 1), clamp(x, 0, 1) and even
    0.5 * clamp(2x, 0, 2) back into RELU_0_TO_1; this form it leaves alone (measured).
    """
    y = torch.clamp(x, max=2.0)
    return torch.relu(y) - torch.relu(y - 1.0)


def hardsigmoid_arith(x: torch.Tensor) -> torch.Tensor:
    """hardsigmoid(x) = relu6(x + 3) / 6 (torch's own formula, bit-exact) -> ADD (fused RELU6) + DIV/MUL."""
    return F.relu6(x + 3.0) / 6.0


class HardsigmoidArith(nn.Module):
    """nn.Hardsigmoid as relu6(x + 3) / 6 (bit-exact), never RELU_0_TO_1."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        y = hardsigmoid_arith(x)
        return x.copy_(y) if self.inplace else y


class Clamp01(nn.Module):
    """nn.Hardtanh(0, 1) / clamp(x, 0, 1) as `clamp01` (bit-exact), never RELU_0_TO_1."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        y = clamp01(x)
        return x.copy_(y) if self.inplace else y


def _hardsigmoid_module(m):
    if type(m) is nn.Hardsigmoid:
        return HardsigmoidArith(m.inplace), "Hardsigmoid -> relu6(x + 3) / 6"
    if type(m) in (nn.Hardtanh,) and (m.min_val, m.max_val) == (0.0, 1.0):
        return Clamp01(m.inplace), "Hardtanh(0, 1) -> relu(y) - relu(y - 1), y = min(x, 2)"
    return None


@register("patch_hardsigmoid", wall="relu_0_to_1")
def patch_hardsigmoid(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """RELU_0_TO_1 sources -> exact arithmetic (wall `relu_0_to_1`, LiteRT#8598).

    Modules: Hardsigmoid -> relu6(x + 3) / 6; Hardtanh(0, 1) -> `clamp01`. Functional: F.hardsigmoid,
    F.hardtanh(x, 0, 1), torch.clamp / Tensor.clamp / clip with bounds (0, 1) -- e.g. hardswish's inner
    term written as x * clamp(x / 6 + 0.5, 0, 1). Bit-exact. nn.Hardswish itself lowers to HARD_SWISH
    here (accepted) and is left alone.
    """
    changes = _replace_modules(model, _hardsigmoid_module, "patch_hardsigmoid")
    if functional:
        changes.append(scope_rewrites(model, ["patch_hardsigmoid"]))
    return changes


@register_handler(F.hardsigmoid, "patch_hardsigmoid")
def _hardsigmoid(input, inplace=False):
    y = hardsigmoid_arith(input)
    return input.copy_(y) if inplace else y


@register_handler(F.hardtanh, "patch_hardsigmoid")
def _hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if (float(min_val), float(max_val)) != (0.0, 1.0):
        return NotImplemented
    y = clamp01(input)
    return input.copy_(y) if inplace else y


def _clamp_bounds(args, kwargs):
    lo = args[0] if len(args) > 0 else kwargs.get("min")
    hi = args[1] if len(args) > 1 else kwargs.get("max")
    return lo, hi


@register_handler(torch.clamp, "patch_hardsigmoid")
@register_handler(torch.clip, "patch_hardsigmoid")
@register_handler(torch.Tensor.clamp, "patch_hardsigmoid")
@register_handler(torch.Tensor.clip, "patch_hardsigmoid")
def _clamp(input, *args, **kwargs):
    lo, hi = _clamp_bounds(args, kwargs)
    if not (_is_number(lo) and _is_number(hi)) or (float(lo), float(hi)) != (0.0, 1.0) or "out" in kwargs:
        return NotImplemented
    return clamp01(input)


# ------------------------------------------------------------------------------------------ amax

def channel_max(x: torch.Tensor, dim=1, keepdim: bool = False) -> torch.Tensor:
    """x.amax(dim, keepdim) as a MAX_POOL_2D: view x as [A, 1, D, B], pool with kernel (D, 1).

    `dim` is an int or a tuple of adjacent dims (reduced together). Bit-exact (max is exact); NaN
    propagation on the GPU follows its pooling kernel. Keeps rank <= 4.
    """
    dims = sorted(d % x.dim() for d in ((dim,) if isinstance(dim, int) else tuple(dim)))
    if not dims:
        dims = list(range(x.dim()))
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise ValueError(f"channel_max reduces adjacent dims only, got {dim}")
    lead = math.prod(x.shape[:dims[0]])
    depth = math.prod(x.shape[dims[0]:dims[-1] + 1])
    tail = math.prod(x.shape[dims[-1] + 1:])
    y = F.max_pool2d(x.reshape(lead, 1, depth, tail), kernel_size=(depth, 1))
    kept = [1 if i in dims else s for i, s in enumerate(x.shape)] if keepdim else \
        [s for i, s in enumerate(x.shape) if i not in dims]
    return y.reshape(kept)


def _amax_ok(x, dim) -> bool:
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or x.dim() == 0:
        return False
    dims = sorted(d % x.dim() for d in ((dim,) if isinstance(dim, int) else tuple(dim)))
    return not dims or dims == list(range(dims[0], dims[-1] + 1))


@register_handler(torch.amax, "patch_amax")
@register_handler(torch.Tensor.amax, "patch_amax")
def _amax(input, dim=(), keepdim=False, *, out=None):
    if out is not None or not _amax_ok(input, dim):
        return NotImplemented
    return channel_max(input, dim, keepdim)


@register_handler(torch.max, "patch_amax")
@register_handler(torch.Tensor.max, "patch_amax")
def _max(input, *args, **kwargs):
    dim = args[0] if args else kwargs.get("dim")
    keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
    if isinstance(dim, torch.Tensor) or "out" in kwargs or not _amax_ok(input, () if dim is None else dim):
        return NotImplemented
    if dim is None:                                   # full reduction -> 0-d
        return channel_max(input, (), False)
    values = channel_max(input, dim, keepdim)
    return torch.return_types.max((values, torch.argmax(input, dim, keepdim)))


@register("patch_amax", wall="amax")
def patch_amax(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """torch.amax / Tensor.amax / torch.max(x, dim) -> `channel_max` (MAX_POOL_2D). Bit-exact.

    The 'NHWC node rewriter not found: amax' failure is gone from litert-torch 0.10.0 (it registers an
    amax rewriter; REDUCE_MAX runs on this GPU); the rewrite remains for older converters and for
    delegates without REDUCE_MAX. Functional only: scopes the handler on `model.forward`.
    """
    return [scope_rewrites(model, ["patch_amax"])] if functional else []


# ------------------------------------------------------------------------------------ SPLIT

def split_slices(x: torch.Tensor, split_size_or_sections, dim: int = 0) -> tuple[torch.Tensor, ...]:
    """torch.split as explicit slices (narrow -> SLICE). Bit-exact."""
    n = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        sizes = [min(size, n - i) for i in range(0, n, size)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ValueError(f"split sizes {sizes} do not add up to {n}")
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(dim, start, s))
        start += s
    return tuple(out)


def chunk_slices(x: torch.Tensor, chunks: int, dim: int = 0) -> tuple[torch.Tensor, ...]:
    """Tensor.chunk as explicit slices, with chunk's sizes (ceil(n / chunks) each, fewer chunks if needed)."""
    n = x.shape[dim]
    size = max(1, -(-n // chunks))
    return split_slices(x, size, dim)


@register_handler(torch.chunk, "patch_chunk")
@register_handler(torch.Tensor.chunk, "patch_chunk")
def _chunk(input, chunks, dim=0):
    return chunk_slices(input, chunks, dim)


@register_handler(torch.split, "patch_chunk")
@register_handler(torch.Tensor.split, "patch_chunk")
def _split(tensor, split_size_or_sections, dim=0):
    if not (isinstance(split_size_or_sections, int) or all(isinstance(s, int) for s in split_size_or_sections)):
        return NotImplemented
    return split_slices(tensor, split_size_or_sections, dim)


@register("patch_chunk", wall="split")
def patch_chunk(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """Tensor.chunk / split / torch.split -> explicit slices (SLICE, never SPLIT). Bit-exact.

    litert-torch 0.10.0 already lowers chunk / split to SLICE; the rewrite pins that for converters that
    emit SPLIT (GPU-rejected). Functional only: scopes the handler on `model.forward`.
    """
    return [scope_rewrites(model, ["patch_chunk"])] if functional else []


# ------------------------------------------------------------------- channel attention via Linear

class LinearAsConv1x1(nn.Module):
    """nn.Linear whose rank-4 calls ([N, H, W, C], channels last) run as a 1x1 Conv2d (exact, same sums).

    Rank-2 and rank-3 calls stay F.linear (FULLY_CONNECTED converts fine). Fixes the conversion failure
    of a Linear applied to a rank-4 tensor ('tfl.batch_matmul' op found invalid output rank; older
    converters: 'tfl.mul operands don't have broadcast-compatible shapes').
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            return F.linear(x, self.weight, self.bias)
        w = self.weight.reshape(self.out_features, self.in_features, 1, 1)
        return F.conv2d(x.permute(0, 3, 1, 2), w, self.bias).permute(0, 2, 3, 1)


def _rank4_linears(model: nn.Module, example_inputs) -> set[str]:
    seen: set[str] = set()
    hooks = []
    for path, m in model.named_modules():
        if type(m) is nn.Linear:
            hooks.append(m.register_forward_pre_hook(
                lambda mod, args, path=path: seen.add(path)
                if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4 else None))
    try:
        args, kwargs = _split_inputs(example_inputs)
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _split_inputs(example_inputs):
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, tuple) and len(example_inputs) == 2 and isinstance(example_inputs[1], dict) \
            and isinstance(example_inputs[0], tuple):
        return example_inputs[0], example_inputs[1]
    return tuple(example_inputs), {}


@register("patch_channel_attention_linear", wall="linear_channel_attention")
def patch_channel_attention_linear(model: nn.Module, example_inputs=None, *, paths: Sequence[str] | None = None
                                   ) -> list[Change]:
    """nn.Linear applied to rank-4 tensors (channel attention, SE blocks in channels-last) -> 1x1 conv.

    Which Linears: those at `paths`; else those a forward pass on `example_inputs` calls with a rank-4
    input; else every nn.Linear (the replacement only changes rank-4 calls). Exact (same products and
    sums, order may differ: fp32 rounding).
    """
    if paths is not None:
        targets = set(paths)
    elif example_inputs is not None:
        targets = _rank4_linears(model, example_inputs)
    else:
        targets = {p for p, m in model.named_modules() if type(m) is nn.Linear}
    changes = []
    for path in sorted(targets):
        m = model.get_submodule(path)
        if type(m) is not nn.Linear or not path:
            continue
        set_submodule(model, path, LinearAsConv1x1(m))
        changes.append(Change(path, f"Linear({m.in_features}->{m.out_features}) on rank-4 input -> 1x1 conv",
                              "patch_channel_attention_linear", True))
    return changes


# ---------------------------------------------------------- identical inputs / constant inputs

def _dim_of(args, kwargs, pos: int, default=None):
    return args[pos] if len(args) > pos else kwargs.get("dim", default)


def _degenerate(x, dim) -> bool:
    return isinstance(x, torch.Tensor) and isinstance(dim, int) and x.dim() > 0 and x.shape[dim] == 1


def _softmax_like(value: float):
    def handler(input, *args, **kwargs):
        dim = _dim_of(args, kwargs, 0)
        dtype = args[2] if len(args) > 2 else kwargs.get("dtype", args[1] if len(args) > 1 and
                                                          isinstance(args[1], torch.dtype) else None)
        if not _degenerate(input, dim):
            return NotImplemented
        return torch.full(input.shape, value, dtype=dtype or input.dtype)
    return handler


for _fn in (F.softmax, torch.softmax, torch.Tensor.softmax):
    register_handler(_fn, "patch_degenerate_softmax")(_softmax_like(1.0))
for _fn in (F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax):
    register_handler(_fn, "patch_degenerate_softmax")(_softmax_like(0.0))


@register("patch_degenerate_softmax", wall="identical_or_constant_inputs")
def patch_degenerate_softmax(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """The degenerate special cases of identical / all-constant inputs (wall `identical_or_constant_inputs`).

    * softmax over a length-1 axis -> ones (log_softmax -> zeros). After conversion such a softmax is
      SUB(x, x) and DIV(e, e); on a constant latent bank (perceiver-style) the ops around it are all-constant.
    * x / x -> ones, x - x -> zeros (the same tensor object on both sides).
    The GPU declines DIV / SUB whose two inputs are one tensor ('No support of few identical inputs';
    reproduced on llvmpipe, LiteRT#9192). Exact for finite inputs (x / x also needs x != 0); where torch
    gives NaN (an inf / NaN entry, 0 / 0) the rewrite gives 1 (0 for x - x). Functional only (nn.Softmax
    calls F.softmax, which the handler sees): scopes the handler on `model.forward`.
    """
    return [scope_rewrites(model, ["patch_degenerate_softmax"])] if functional else []


@register_handler(torch.div, "patch_degenerate_softmax")
@register_handler(torch.true_divide, "patch_degenerate_softmax")
@register_handler(torch.Tensor.div, "patch_degenerate_softmax")
@register_handler(torch.Tensor.__truediv__, "patch_degenerate_softmax")
def _div_self(input, other=None, *, rounding_mode=None, out=None):
    if input is not other or rounding_mode is not None or out is not None or not input.dtype.is_floating_point:
        return NotImplemented
    return torch.ones_like(input)


@register_handler(torch.sub, "patch_degenerate_softmax")
@register_handler(torch.Tensor.sub, "patch_degenerate_softmax")
@register_handler(torch.Tensor.__sub__, "patch_degenerate_softmax")
def _sub_self(input, other=None, *, alpha=1, out=None):
    if input is not other or alpha != 1 or out is not None or not input.dtype.is_floating_point:
        return NotImplemented
    return torch.zeros_like(input)
