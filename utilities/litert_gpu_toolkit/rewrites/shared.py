"""Helpers that several walls use, in one place: walls import these instead of importing each other.

* The value store of index math that depends on no input (`value_of`, `remember`, `constant`, `real_values`):
  a traced tensor's value as a plain CPU tensor, kept beside it while `GpuRewriteWrapper` runs, so a rewrite can
  fold it into a constant (`patch_fold_index_math`, the mask and broadcast rules).
* Exact arithmetic forms the GPU runs, each documented where it is defined: `arith_where` / `elu_arith` (no
  SELECT), `expand_by_cat` / `repeat_kv_cat` (no runtime BROADCAST_TO), `conv_per_group` (no grouped CONV_2D),
  the slice-and-concatenate reflect pads (no GATHER_ND).

Each wall that owns the math still re-exports its names, so `rewrites.select.arith_where` and
`from litert_gpu_toolkit.rewrites import arith_where` keep working.
"""
from __future__ import annotations

import contextlib
import math
import weakref
from typing import Sequence

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes

from .scoping import _scalar_value


# ---- from gather_nd/index_math.py (its wall re-exports these)

MAX_FOLD_ELEMENTS = 1 << 18


# id -> (weakref to the traced tensor, its value as a plain CPU tensor)
_VALUES: dict[int, tuple[weakref.ref, torch.Tensor]] = {}


def value_of(t) -> torch.Tensor | None:
    """The value of a traced tensor that depends on no input (a plain CPU tensor), or None. Compute with it
    only inside `real_values()`: a tracing mode would turn it into a traced tensor."""
    if not isinstance(t, torch.Tensor):
        return None
    entry = _VALUES.get(id(t))
    if entry is None or entry[0]() is not t:
        return None
    return entry[1]


@contextlib.contextmanager
def real_values():
    """Context: torch calls run on plain tensors, outside every tracing mode -- torch.export's fake tensors and
    its torch-function modes alike, so nothing computed here is recorded or tracked by the trace."""
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


def forget(t) -> None:
    _VALUES.pop(id(t), None)


def remember(t: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Record `value` (a plain tensor) as the value of the traced tensor `t`; returns `t`."""
    if len(_VALUES) > 4096:                                      # drop the entries of dead tensors
        for k in [k for k, (r, _) in _VALUES.items() if r() is None]:
            del _VALUES[k]
    _VALUES[id(t)] = (weakref.ref(t), value)
    return t


def constant(value: torch.Tensor) -> torch.Tensor:
    """`value` as a tensor of the traced graph (a constant there), remembered with its value. The tensor is built
    from Python numbers read outside every tracing mode (inside them, `tolist` of a plain tensor gives symbolic
    floats); a plain tensor passed into the trace instead was mixed up with another constant by the conversion."""
    with real_values():
        value = value.detach()
        data = value.tolist() if value.dim() else value.item()
    return remember(torch.tensor(data, dtype=value.dtype), value)


# storages of the real parameters and buffers behind values (`patch_fold_constants`): never written in place
PROTECTED: set[int] = set()


# ---- from select.py (its wall re-exports these)

FP16_MAX = 65504.0      # fp16's largest finite value: a constant beyond it is +/-inf on the fp16 GPU


def _branch_term(value, sel: torch.Tensor, lsel_off: torch.Tensor | None, nonfinite: str):
    """The contribution of one where-branch: `value` where sel == 1, (+/-)0 where sel == 0."""
    c = _scalar_value(value)
    if c is not None:
        if math.isnan(c):
            return None
        if math.isinf(c):            # -log(1 - sel) is +inf where sel == 1 and 0 where sel == 0
            off = torch.log(1 - sel) if lsel_off is None else lsel_off
            return -off if c > 0 else off
        if abs(c) > FP16_MAX:        # c * sel would be inf * 0 = NaN on the fp16 GPU (c is inf there)
            off = torch.log(1 - sel) if lsel_off is None else lsel_off
            return torch.clamp(off, min=c) if c < 0 else torch.clamp(-off, max=c)
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
    constant c is c * sel, +/-inf is +/-(-log(1 - sel)) (the usual -inf attention mask is log(m)), and a
    finite constant beyond fp16's range (finfo(float32).min) is clamp(log(1 - sel), min=c): exactly c or 0
    in fp32, and -inf or 0 on the fp16 GPU, where c * sel would be inf * 0 = NaN.
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


def elu_arith(x: torch.Tensor, alpha: float, scale: float = 1.0, input_scale: float = 1.0,
              expm1=torch.expm1) -> torch.Tensor:
    """ELU / CELU / SELU without SELECT: scale * (relu(x) + alpha * expm1(min(x, 0) * input_scale)), the one
    written-out form of the family (`patch_safe_expm1` passes its cancellation-free expm1).

    Exact to fp32 rounding (<= 2 ulp of alpha * scale absolute) for every input, inf included: the
    exponential never sees a positive argument, so no branch overflows.
    """
    neg = -torch.relu(-x)
    if input_scale != 1.0:
        neg = neg * input_scale
    y = torch.relu(x) + alpha * expm1(neg)
    return y * scale if scale != 1.0 else y


# ---- from broadcast_to.py (its wall re-exports these)

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


# ---- from transpose_conv/spec.py (its wall re-exports these)

def _conv(ndim: int):
    return F.conv1d if ndim == 1 else F.conv2d


def conv_per_group(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int,
                 padding: int = 0, dilation=1, stride=1) -> torch.Tensor:
    """Stride-1 conv with `groups`, split into one conv per group unless the GPU runs the grouped form right.

    Measured on llvmpipe (ai-edge-litert 2.3.0): a grouped CONV_2D returns wrong values (or crashes)
    unless both channels-per-group counts are multiples of 4; depthwise (1 input channel per group,
    any multiplier) is fine. The split (SLICE + CONV_2D per group + CONCATENATION) is exact.
    """
    conv = _conv(x.dim() - 2)
    cig, cog = weight.shape[1], weight.shape[0] // groups
    if groups == 1 or cig == 1 or (cig % 4 == 0 and cog % 4 == 0):
        return conv(x, weight, bias, stride, padding, dilation, groups)
    outs = [conv(x[:, i * cig:(i + 1) * cig], weight[i * cog:(i + 1) * cog],
                 None if bias is None else bias[i * cog:(i + 1) * cog], stride, padding, dilation)
            for i in range(groups)]
    return torch.cat(outs, 1)


# ---- from gather_nd/reflect_pad.py (its wall re-exports these)

def _pad_axis(x: torch.Tensor, dim: int, left: int, right: int, mode: str) -> torch.Tensor:
    n = x.shape[dim]
    if mode == "reflect":
        if left >= n or right >= n:
            raise ValueError(f"reflect padding ({left}, {right}) must be smaller than the axis size {n}")
        pieces = [x.narrow(dim, i, 1) for i in range(left, 0, -1)]
        pieces.append(x)
        pieces += [x.narrow(dim, n - 1 - i, 1) for i in range(1, right + 1)]
    elif mode == "replicate":
        first, last = x.narrow(dim, 0, 1), x.narrow(dim, n - 1, 1)
        pieces = [first] * left + [x] + [last] * right
    elif mode == "circular":
        if left > n or right > n:
            raise ValueError(f"circular padding ({left}, {right}) must not exceed the axis size {n}")
        pieces = ([x.narrow(dim, n - left, left)] if left else []) + [x] + ([x.narrow(dim, 0, right)] if right else [])
    else:
        raise ValueError(f"unknown padding mode {mode!r}")
    return torch.cat(pieces, dim) if len(pieces) > 1 else x


def pad_by_slices(x: torch.Tensor, pad: Sequence[int], mode: str = "reflect") -> torch.Tensor:
    """F.pad(x, pad, mode) for mode reflect / replicate / circular, built from slices and one
    concatenation per padded axis. Bit-exact (data movement only), any input values.

    `pad` is F.pad's tuple (last axis first). Cost: one copy of the padded tensor per padded axis
    and 2 * pad width one-wide slices; cheap for the small pads of convolutions.
    """
    pad = [int(p) for p in pad]
    if len(pad) % 2 or any(p < 0 for p in pad):
        raise ValueError(f"pad {pad} must be non-negative pairs")
    y = x
    for i in range(len(pad) // 2):
        left, right = pad[2 * i], pad[2 * i + 1]
        if left or right:
            y = _pad_axis(y, x.dim() - 1 - i, left, right, mode)
    return y


def exchange_matrix(n: int) -> torch.Tensor:
    """The n x n exchange matrix (ones on the anti-diagonal): `x @ J` reverses the last axis of x."""
    return torch.flip(torch.eye(n), (0,))


def reflect_pad_exchange(x: torch.Tensor, left: int, right: int, exchange: torch.Tensor | None = None) -> torch.Tensor:
    """F.pad(x, (left, right), mode="reflect") on the last axis as a slice per side reversed by a matmul with
    the exchange matrix, then one concatenation: at most 5 GPU ops whatever the pad (the slices form,
    `pad_by_slices`, needs one op per padded sample). Bit-exact in any precision: each output is one input
    times 1.0 plus zeros. `exchange` (a buffer, so it is not rebuilt per call) serves a side of its size."""
    length = int(x.shape[-1])
    if max(left, right) >= length:
        raise ValueError(f"reflect padding ({left}, {right}) needs more than {max(left, right)} samples, got {length}")

    def rev(part: torch.Tensor, n: int) -> torch.Tensor:
        j = exchange if exchange is not None and exchange.shape[0] == n else exchange_matrix(n)
        return torch.matmul(part, j)

    parts = [rev(x[..., 1:left + 1], left)] if left else []
    parts.append(x)
    if right:
        parts.append(rev(x[..., length - right - 1:length - 1], right))
    return torch.cat(parts, dim=-1) if len(parts) > 1 else x


# ---- per-axis arguments (kernel_size=3 or (3, 3)): maxpool, interpolate, reflect pads, constant resizes

def per_axis(v, n: int) -> tuple[int, ...]:
    """An int-or-sequence argument as `n` ints, one per spatial axis."""
    return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * n


def conv_axes(v, n: int) -> tuple[int, ...] | None:
    """A conv's stride / padding / dilation as `n` ints (a one-element sequence is repeated); None when a sequence
    has another length (the caller then leaves the call alone)."""
    if isinstance(v, (tuple, list)):
        v = tuple(int(a) for a in v)
        return v if len(v) == n else (v * n if len(v) == 1 else None)
    return (int(v),) * n
