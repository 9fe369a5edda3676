"""HF's finfo.min attention-mask fill without SELECT and without a NaN on the fp16 GPU.

`patch_mask_fill_exact` (default on, exact): `torch.where(cond, a, c)` with a constant c beyond fp16's
range as a SELECT-free form whose c term is `clamp(log(m), min=c)` -- never a product with c.
`patch_mask_scale_exact` (default on): a runtime tensor times a number beyond fp16's range -- Funnel's
`scores - 1e6 * (1 - mask)`, XLNet's `1e30 * mask` -- as exp(log|c| + log t) over t's positive and negative
parts, never a product with c: where t is 0 the term is exp(-inf) = 0, not the 0 * inf = NaN of the fp16 GPU.
Equal to c * t to fp32 rounding of the exp / log: relative <= (|log|c|| + |log|t||) * 2^-23, 1e-5 for
|c| <= 1e30 and |t| in [1e-3, 1e3]; exactly 0 where t is 0.
`patch_mask_fill_fp16` (opt-in, approximate): the fill as -1e4.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import Change, register
from ..functional import HANDLERS
from ..scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401
from ..shared import real_values, value_of
from ..shared import FP16_MAX, arith_where

MASK_FILL = 1e4


def _fill_fp16(value):
    """`value` with a finite constant beyond fp16's range replaced by -/+1e4; None when nothing to replace."""
    c = _scalar_value(value)
    if c is None or math.isinf(c) or math.isnan(c) or abs(c) <= FP16_MAX:
        return None
    return math.copysign(MASK_FILL, c)


def _number(v):
    """A one-element tensor that depends on no input (HF's `torch.zeros((), dtype=...)` branch) as its
    Python number -- a blend with a number needs no op on it; anything else unchanged."""
    known = value_of(v)
    if known is not None and known.numel() == 1 and known.dim() == 0 and known.dtype.is_floating_point:
        with real_values():
            return float(known)
    return v


def _mask_fill_handler(cond, input=None, other=None, *, out=None):
    if input is None or other is None or out is not None or not isinstance(cond, torch.Tensor):
        return NotImplemented
    dtype = torch.result_type(input, other)
    if _static(cond, input, other):
        return NotImplemented
    input, other = _number(input), _number(other)
    a, b = _fill_fp16(input), _fill_fp16(other)
    if a is None and b is None:
        return NotImplemented
    try:
        return arith_where(cond, input if a is None else a, other if b is None else b).to(dtype)
    except (TypeError, ValueError):
        return NotImplemented


def _big(value) -> float | None:
    """A finite constant beyond fp16's range (HF's finfo(float32).min), else None."""
    c = _scalar_value(value)
    return c if c is not None and math.isfinite(c) and abs(c) > FP16_MAX else None


def _fill_term(selected: torch.Tensor, c: float) -> torch.Tensor:
    """c where `selected` (0. / 1.) is 1, 0 elsewhere, by clamping a log: log(1) = 0 and log(0) = -inf,
    so clamp(log(selected), min=c) is 0 / c for c < 0 (and the negation for c > 0). No product with c:
    on the fp16 GPU, c is -inf and the masked scores become -inf, which softmax maps to 0 as in fp32."""
    off = torch.log(1 - selected)                    # -inf where selected, 0 elsewhere
    return torch.clamp(off, min=c) if c < 0 else torch.clamp(-off, max=c)


def mask_fill_exact(cond: torch.Tensor, input, other) -> torch.Tensor:
    """`torch.where(cond, input, other)` where one branch is a finite constant beyond +/-65504: the other
    branch by `arith_where` (with 0 for the big one), plus `_fill_term`. Exact: each output is the selected
    value plus an exact 0 (a -0 may come back as +0)."""
    a, b = _big(input), _big(other)
    if (a is None) == (b is None):
        raise ValueError("exactly one branch must be a constant beyond fp16's range")
    dtype = torch.result_type(input, other)
    m = (cond if cond.dtype == torch.bool else cond != 0).to(dtype)
    rest = arith_where(cond, 0.0 if a is not None else input, 0.0 if b is not None else other)
    big = _fill_term(m, a) if a is not None else _fill_term(1 - m, b)
    return (rest + big).to(dtype)


def _static(*values) -> bool:
    """Every tensor among `values` depends on no input: `patch_fold_index_math` makes the result a constant."""
    return all(value_of(v) is not None for v in values if isinstance(v, torch.Tensor))


def _mask_fill_exact_handler(cond, input=None, other=None, *, out=None):
    if input is None or other is None or out is not None or not isinstance(cond, torch.Tensor) \
            or _static(cond, input, other):
        return NotImplemented
    if (_big(input) is None) == (_big(other) is None):
        return NotImplemented
    dtype = torch.result_type(input, other)
    try:
        return mask_fill_exact(cond, _number(input), _number(other)).to(dtype)
    except (TypeError, ValueError, RuntimeError):
        return NotImplemented


def big_scale(t: torch.Tensor, c: float) -> torch.Tensor:
    """c * t for a finite number |c| > 65504, as exp(log|c| + log t+) - exp(log|c| + log t-) with t+ / t- the
    positive / negative parts of t (see the module docstring). No op ever holds c itself."""
    lc = math.log(abs(c))
    out = torch.exp(torch.log(torch.relu(t)) + lc) - torch.exp(torch.log(torch.relu(-t)) + lc)
    return out if c > 0 else -out


def _scale_handler(a, b=None, *, out=None):
    if b is None or out is not None:
        return NotImplemented
    t, c = (a, _big(_number(b))) if isinstance(a, torch.Tensor) else (b, _big(_number(a)))
    if c is None or not isinstance(t, torch.Tensor) or t.is_complex() or value_of(t) is not None:
        return NotImplemented
    from ..functional import in_active_mode

    if not t.is_floating_point():             # an integer / bool mask times a float number: a float result
        t = in_active_mode(t.to, torch.result_type(t, c))
    return in_active_mode(big_scale, t, c)


for _f in (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__):
    HANDLERS.setdefault(_f, []).append(("patch_mask_scale_exact", _scale_handler))


# ahead of patch_select's handler: it sees HF's `torch.where(mask, 0, finfo(float32).min)` first
HANDLERS.setdefault(torch.where, []).insert(0, ("patch_mask_fill_exact", _mask_fill_exact_handler))
HANDLERS[torch.where].insert(0, ("patch_mask_fill_fp16", _mask_fill_handler))    # opt-in: wins when asked for


@register("patch_mask_fill_exact", wall="fp16_overflow")
def patch_mask_fill_exact(model: nn.Module) -> list[Change]:
    """Exact, default on. Wall: Hugging Face builds additive attention masks as
    `torch.where(keep, 0, finfo(float32).min)`. A SELECT-free blend multiplies that constant by 0, and on the
    fp16 GPU the constant is -inf: NaN everywhere. `mask_fill_exact` builds the constant's term as
    clamp(log(m), min=c) instead: bit-equal to torch.where in fp32 (up to the sign of a zero); on the GPU the
    masked positions hold -inf (c in fp16) and softmax gives them weight 0 as torch does. The one difference:
    a row with every position masked is uniform in torch and NaN on the fp16 GPU (-inf - -inf).
    Functional only (handler on torch.where)."""
    return []


@register("patch_mask_scale_exact", wall="fp16_overflow")
def patch_mask_scale_exact(model: nn.Module) -> list[Change]:
    """Default on. Wall: an additive attention mask made by scaling a 0 / 1 mask with a number beyond fp16's range
    (Funnel: `scores - 1e6 * (1 - mask)`): on the fp16 GPU the number is inf and the kept positions get 0 * inf =
    NaN, or wrong scores (Funnel: corr 0.84 at full residency, llvmpipe). `big_scale` writes c * t as exp(log|c| +
    log t) over t's signed parts: 0 stays 0, a masked score is -inf as in `patch_mask_fill_exact`. Equal to the
    product to fp32 rounding of exp / log (relative <= 1e-5 for |c| <= 1e30). Functional only (handlers on mul)."""
    return []


@register("patch_mask_fill_fp16", wall="fp16_overflow", exact=False, default=False)
def patch_mask_fill_fp16(model: nn.Module) -> list[Change]:
    """APPROXIMATE, opt-in (`convert_for_gpu(..., include=["patch_mask_fill_fp16"], approximate=True)`).

    Wall: Hugging Face builds additive attention masks as `torch.where(keep, 0, finfo(float32).min)`.
    On the fp16 GPU that constant is -inf, and any SELECT-free form of the where (`patch_select`)
    multiplies it by 0: NaN everywhere (measured: tiny BERT with a padding mask, 98/98 ops on the GPU,
    output non-finite). This rewrite fills with -1e4 instead (the value MiniLM's recipe uses), still
    without SELECT. Bound: softmax(s + mask) is unchanged in fp32 whenever the attention scores of a row
    span less than ~9,900 (exp(-(1e4 - spread)) underflows to 0 either way); a fully masked row gives the
    same uniform weights as with finfo.min. Any other use of a where with a constant beyond +/-65504
    gets +/-1e4, hence opt-in."""
    return []
