"""Wall `identical_or_constant_inputs`: ops whose two inputs are one tensor, or whose inputs are all constants.

'No support of few identical inputs' / 'Expected 1 const input tensor(s)' (LiteRT#9192). The rewrites:

* `patch_fold_constants` (default): any call whose tensor arguments are all constants -- parameters,
  buffers, index math -- is computed once by torch while tracing and enters the graph as its result (below);

* `patch_degenerate_softmax`: softmax over a length-1 axis -> ones, x / x -> ones, x - x -> zeros;
* `l2_normalize` (handler on F.normalize): L2 normalisation without MUL(x, x) (below);
* `constant_to_input` (implemented in `rewrites.constant_blowup`): feed one constant operand at run time.


L2 normalisation without an op that takes the same tensor twice.

`F.normalize(x, p=2)` (and `torch.linalg.vector_norm`, `x.norm()`, `(x ** 2).sum()`) lowers to
`MUL(x, x)` (after an ABS) -> SUM -> SQRT -> MAXIMUM -> DIV. Phone GPU delegates decline a node whose
two inputs are the same tensor (symptom `identical_or_constant_inputs`, google-ai-edge/LiteRT#9192;
the desktop WebGPU accelerator accepts it, so only the lint sees it here).

`l2_normalize(x, dim)` squares |x| as ABS(x) * MAXIMUM(x, -x): the same values from two different
tensors, so no node takes one tensor twice; the SUM stays a SUM (a BATCH_MATMUL dot product was
tried and lost ~2.5e-3 of the norm in fp16 on llvmpipe). It also works on x / s, s = max(max|x|, 2^-14)
along `dim`, for two fp16 walls of the plain formula (both measured on llvmpipe):

* a zero vector (a padded token's key: Swin-V2 pads windows with zeros and zeroes the key bias) gives
  0 / max(0, eps), and eps = 1e-12 is 0 in fp16: NaN, which the softmax spreads over every query;
* a sum of squares passes 65504 once |x| exceeds 256 / sqrt(n) (trained outlier channels).

With the scale, the norm of x / s is at least 1 whenever max|x| >= 2^-14, and the denominator is clamped
at 2^-14 (fp16's smallest normal) instead of eps. Bound: equal to `F.normalize(x, p=2)` up to fp32
summation order (~1e-7 relative) for every x with ||x|| >= 2^-28 (3.7e-9) and for x = 0; a nonzero x
below that (every entry under fp16's smallest subnormal, so zero on an fp16 GPU anyway) comes out
scaled by ||x|| / 2^-28 instead of ||x|| / max(||x||, eps).
`F.normalize` calls are routed here under `GpuRewriteWrapper` (handler name `l2_normalize`).
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .registry import declare
from .functional import ARG_REWRITERS, ENTER_HOOKS, HANDLERS, PRE_HANDLERS, register_handler
from .scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401
# One implementation of "make a constant operand a runtime input" lives in rewrites.constant_blowup.


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
        if not _degenerate(input, dim) or not all(isinstance(d, int) for d in input.shape):
            return NotImplemented
        from .shared import constant, real_values
        with real_values():                # a known constant: a later product with it can be rewritten
            ones = torch.full(tuple(input.shape), value, dtype=dtype or input.dtype)
        return constant(ones)
    return handler


for _fn in (F.softmax, torch.softmax, torch.Tensor.softmax):
    register_handler(_fn, "patch_degenerate_softmax")(_softmax_like(1.0))
for _fn in (F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax):
    register_handler(_fn, "patch_degenerate_softmax")(_softmax_like(0.0))


def _sdpa_one_key(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Attention over a single key: its softmax weight is exactly 1, so the output is that value for every query
    (MobileViT's patch transformers at a 4x4 map attend over one token; the fused op became DIV(e, e))."""
    if dropout_p or not all(isinstance(t, torch.Tensor) for t in (query, key, value)) or key.dim() < 2 \
            or int(key.shape[-2]) != 1 or int(value.shape[-2]) != 1 or query.dim() != value.dim():
        return NotImplemented
    if enable_gqa and value.shape[-3] != query.shape[-3]:
        n_rep = int(query.shape[-3]) // int(value.shape[-3])
        value = torch.cat([value.narrow(-3, i, 1) for i in range(int(value.shape[-3])) for _ in range(n_rep)], dim=-3)
    length = int(query.shape[-2])
    return value if length == 1 else torch.cat([value] * length, dim=-2)


HANDLERS.setdefault(F.scaled_dot_product_attention, []).insert(0, ("patch_degenerate_softmax", _sdpa_one_key))


@register("patch_degenerate_softmax", wall="identical_or_constant_inputs")
def patch_degenerate_softmax(model: nn.Module, *, functional: bool = True) -> list[Change]:
    """The degenerate special cases of identical / all-constant inputs (wall `identical_or_constant_inputs`).

    * softmax over a length-1 axis -> ones (log_softmax -> zeros). After conversion such a softmax is
      SUB(x, x) and DIV(e, e); on a constant latent bank (perceiver-style) the ops around it are all-constant.
    * x / x -> ones, x - x -> zeros (the same tensor object on both sides);
    * F.scaled_dot_product_attention over a single key -> that value for every query.
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


_NORM_FLOOR = 2.0 ** -14     # fp16's smallest normal number: a clamp the GPU keeps (eps = 1e-12 is 0 in fp16)


def l2_normalize(x: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    """x / max(||x||_2, eps) along `dim`, like F.normalize(x, p=2, dim, eps); finite in fp16 for a zero vector
    and for |x| past 256 (bound in the module docstring)."""
    s = torch.amax(x.abs(), dim=dim, keepdim=True).clamp(min=_NORM_FLOOR)
    xs = x / s
    # |xs| twice, by two different ops (ABS and MAXIMUM(xs, -xs)): equal values, different tensors
    squared = (xs.abs() * torch.maximum(xs, -xs)).sum(dim, keepdim=True)
    return xs / torch.sqrt(squared).clamp(min=max(eps / _NORM_FLOOR, _NORM_FLOOR))


@register_handler(F.normalize, "l2_normalize")
def _normalize_handler(input, p=2.0, dim=1, eps=1e-12, out=None):
    if p != 2 or out is not None:
        return NotImplemented
    return l2_normalize(input, dim, eps)


# ------------------------------------------------------- relative-position buckets (all-constant ops)

def _static_key(*values):
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):                    # symbolic sizes (dynamic shapes): no cache
        return None


def _exporting() -> bool:
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting and is_exporting())


class _CachedBias:
    """`compute_bias` with the bucket ids computed eagerly once per (query, key, past) length and
    reused as a constant while tracing (see `patch_relative_position_bias`)."""

    def __init__(self, module):
        self.module = module
        self.original = type(module).compute_bias
        self.buckets: dict[tuple, torch.Tensor] = {}

    def __call__(self, query_length, key_length, device=None, past_seen_tokens=0, **kwargs):
        m = self.module
        key = _static_key(query_length, key_length, past_seen_tokens)
        if key is None or kwargs:
            return self.original(m, query_length, key_length, device, past_seen_tokens, **kwargs)
        if key not in self.buckets:
            if _exporting():
                return self.original(m, query_length, key_length, device, past_seen_tokens)
            q, k, past = key
            rel = torch.arange(k)[None, :] - (torch.arange(q)[:, None] + past)
            self.buckets[key] = m._relative_position_bucket(
                rel, bidirectional=not getattr(m, "is_decoder", False),
                num_buckets=m.relative_attention_num_buckets, max_distance=m.relative_attention_max_distance)
        values = m.relative_attention_bias(self.buckets[key])          # [q, k, heads]
        return values.permute([2, 0, 1]).unsqueeze(0)


def _has_relative_bias(m) -> bool:
    return (callable(getattr(type(m), "compute_bias", None)) and callable(getattr(m, "_relative_position_bucket", None))
            and isinstance(getattr(m, "relative_attention_bias", None), nn.Embedding)
            and hasattr(m, "relative_attention_num_buckets") and hasattr(m, "relative_attention_max_distance"))


@register("patch_relative_position_bias", wall="identical_or_constant_inputs")
def patch_relative_position_bias(model: nn.Module, example_inputs=None) -> list[Change]:
    """T5-family relative position bias (T5, mT5, UMT5, LongT5, ...) without all-constant ops.

    `compute_bias(q, k)` builds bucket ids from `arange` through ABS / LOG / MINIMUM / SELECT: ops whose
    inputs are all constants, which the converter does not fold and the GPU rejects ('Expected 0 const
    input tensor(s)'). The patch computes the bucket ids eagerly with the module's own
    `_relative_position_bucket` (one forward on `example_inputs` fills the cache per sequence length)
    and feeds them to the bias embedding as a constant while tracing. Exact: the same integer ids, the
    same embedding rows. Lengths not seen in the example forward (or symbolic) use the original code."""
    changes = []
    for path, m in model.named_modules():
        if not _has_relative_bias(m) or isinstance(m.__dict__.get("compute_bias"), _CachedBias):
            continue
        m.compute_bias = _CachedBias(m)
        changes.append(Change(path, f"{type(m).__name__}.compute_bias -> bucket ids computed once, constant "
                                    "while tracing", "patch_relative_position_bias", True))
    if changes and example_inputs is not None:
        from .apply import split_example_inputs

        args, kw = split_example_inputs(example_inputs)
        with torch.no_grad():
            model(*args, **kw)
    return changes


declare("l2_normalize", wall="identical_or_constant_inputs")


# ------------------------------------------------------------ calls on constants, computed once by torch

# What the converter keeps as ops on constants, and the GPU then declines ('Expected 1 or 2 input tensor(s), but
# node has 0 runtime inputs', 'Expected 0 const input tensor(s)', a GATHER_ND on a constant table): Swin-v2's
# continuous position-bias MLP run on a coordinate buffer and indexed by a buffer of ids, a resized position
# table, a layer-norm of a latent bank, a weight built from parameters in forward. `patch_fold_constants` gives
# every parameter and buffer its value while `GpuRewriteWrapper` runs (torch.export traces with stand-ins) and
# folds any call whose tensor arguments all have values: torch computes it on those values, outside the trace,
# and the result enters the graph as one constant. Exact: the very same torch call on the very same numbers
# (bit-identical). Not folded: in-place calls and item assignment (they drop the value instead), random calls,
# results that are not tensors, and results larger than both 2**18 elements and their inputs together (a
# constant blow-up). `item()` / `int()` / `bool()` ... of a constant return its numbers: a data-dependent Python
# branch or size on a constant becomes a plain one. Functional only.

_RANDOM = ("rand", "normal", "bernoulli", "multinomial", "poisson", "exponential_", "cauchy_", "geometric_")


_AUGMENTED = {f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
                                       "lshift", "rshift", "matmul")}


# calls that turn a tensor into Python numbers: on a constant they return its numbers, so torch.export meets a plain
# number where it would have met a data-dependent value (`if n_frames > 1`, F.pad with tensor amounts)
_TO_PYTHON = {"item", "tolist", "__index__", "__int__", "__float__", "__bool__"}


def _never_folded(func) -> bool:
    name = getattr(func, "__name__", "") or ""
    return (name.endswith("_") and not name.endswith("__")) or name in ("__setitem__", "__delitem__") \
        or name in _AUGMENTED or any(r in name for r in _RANDOM)


def _tensors(v, found: list) -> list:
    if isinstance(v, torch.Tensor):
        found.append(v)
    elif isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        for x in v:
            _tensors(x, found)
    elif isinstance(v, dict):
        for x in v.values():
            _tensors(x, found)
    return found


def _fold_call(func, args, kwargs):
    from .shared import MAX_FOLD_ELEMENTS, constant, real_values, value_of
    if kwargs.get("out") is not None or _never_folded(func):
        return NotImplemented
    if "dropout" in (getattr(func, "__name__", "") or "") and (kwargs.get("training", len(args) < 3 or args[2])
                                                               or kwargs.get("train")):
        return NotImplemented                      # random in training mode; the identity in eval
    found = _tensors(args, _tensors(kwargs, []))
    if not found or any(value_of(t) is None for t in found):
        return NotImplemented

    def values(v):
        if isinstance(v, torch.Tensor):
            return value_of(v)
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            return type(v)(values(x) for x in v)
        if isinstance(v, dict):
            return {k: values(x) for k, x in v.items()}
        return v
    try:
        with real_values(), torch.no_grad():
            out = func(*values(args), **values(kwargs))
    except Exception:                          # noqa: BLE001 - the traced call raises (or not) as it would have
        return NotImplemented
    if getattr(func, "__name__", "") in _TO_PYTHON and isinstance(out, (bool, int, float, list)):
        return out                 # a constant's number: a Python branch on it needs no guard (EnCodec's paddings)
    if _views_of(out, [value_of(t) for t in found]):
        # a view (x[a:b], x.view(...), x.t()): traced as itself, with the value's view as its value, so an in-place
        # change through it reaches the base in both (torchvision's Swin-v2 zeroes qkv_bias[n:2n] of a clone)
        from .shared import remember
        traced = func(*args, **kwargs)
        if isinstance(traced, torch.Tensor):
            return remember(traced, out)
        if isinstance(traced, (tuple, list)) and len(traced) == len(out):
            return type(traced)(remember(t, o) if isinstance(t, torch.Tensor) else t for t, o in zip(traced, out))
        return NotImplemented
    cap = max(MAX_FOLD_ELEMENTS, sum(t.numel() for t in found))

    def foldable(o) -> bool:
        return isinstance(o, torch.Tensor) and o.numel() <= cap and not o.dtype.is_complex and o.device.type == "cpu"
    if foldable(out):
        return constant(out)
    if isinstance(out, tuple) and out and all(foldable(o) for o in out):
        folded = [constant(o) for o in out]
        return tuple(folded) if type(out) is tuple else type(out)(folded)
    return NotImplemented


def _views_of(out, bases: list) -> bool:
    """`out` (a tensor or a tuple of them) shares memory with one of `bases`."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    ptrs = {b.untyped_storage().data_ptr() for b in bases if isinstance(b, torch.Tensor) and b.numel()}
    return any(isinstance(o, torch.Tensor) and o.numel() and o.untyped_storage().data_ptr() in ptrs for o in outs)


def _seed_values(model: nn.Module, snapshot: dict):
    """Give each parameter and buffer of `model` (a torch.export stand-in while tracing) its real value."""
    from .shared import PROTECTED, forget, real_values, remember
    seeded = []
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        real = snapshot.get(name)
        if isinstance(real, torch.Tensor) and isinstance(t, torch.Tensor) and real.shape == t.shape \
                and real.dtype == t.dtype and real.device.type == "cpu":
            with real_values():                 # (detach under the tracing modes would make a stand-in)
                value = real.detach()
                if value.numel():
                    PROTECTED.add(value.untyped_storage().data_ptr())   # an in-place call never writes to it
            remember(t, value)
            seeded.append(t)

    def undo():
        for t in seeded:
            forget(t)
        PROTECTED.clear()
    return undo


def _sizes_as_numbers(args, kwargs):
    """0-dim integer constants inside a list / tuple argument (sizes, paddings: EnCodec pads by
    `(self.padding_total, extra_padding)`, tensors computed from buffers) become Python ints."""
    from .shared import real_values, value_of
    def number(v):
        if isinstance(v, torch.Tensor) and v.dim() == 0 and not v.dtype.is_floating_point:
            known = value_of(v)
            if known is not None:
                with real_values():
                    return int(known)
        return v

    def walk(v):
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size) and \
                any(isinstance(x, torch.Tensor) and x.dim() == 0 for x in v):
            new = [number(x) for x in v]
            return type(v)(new) if isinstance(v, list) else tuple(new), any(a is not b for a, b in zip(new, v))
        return v, False
    changed = False
    new_args = []
    for a in args:
        a, c = walk(a)
        new_args.append(a)
        changed |= c
    new_kwargs = {}
    for k, v in kwargs.items():
        v, c = walk(v)
        new_kwargs[k] = v
        changed |= c
    return (tuple(new_args), new_kwargs) if changed else None


ARG_REWRITERS.append(("patch_fold_constants", _sizes_as_numbers))
PRE_HANDLERS.append(("patch_fold_constants", _fold_call))
ENTER_HOOKS["patch_fold_constants"] = _seed_values


@register("patch_fold_constants", wall="identical_or_constant_inputs")
def patch_fold_constants(model: nn.Module) -> list[Change]:
    """Functional only (see the comment above `_RANDOM`): returns no changes by itself."""
    return []
