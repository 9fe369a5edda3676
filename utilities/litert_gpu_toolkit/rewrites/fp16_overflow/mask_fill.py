"""Opt-in, approximate: HF's finfo.min attention-mask fill as -1e4 without SELECT (fp16 overflow to -inf).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import Change, register
from ..functional import HANDLERS
from ..scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401
from ..select import arith_where


# ------------------------------------------------------------------ fp16-safe attention-mask fill

FP16_MAX = 65504.0
MASK_FILL = 1e4


def _fill_fp16(value):
    """`value` with a finite constant beyond fp16's range replaced by -/+1e4; None when nothing to replace."""
    c = _scalar_value(value)
    if c is None or math.isinf(c) or math.isnan(c) or abs(c) <= FP16_MAX:
        return None
    return math.copysign(MASK_FILL, c)


def _mask_fill_handler(cond, input=None, other=None, *, out=None):
    if input is None or other is None or out is not None or not isinstance(cond, torch.Tensor):
        return NotImplemented
    a, b = _fill_fp16(input), _fill_fp16(other)
    if a is None and b is None:
        return NotImplemented
    try:
        return arith_where(cond, input if a is None else a, other if b is None else b)
    except (TypeError, ValueError):
        return NotImplemented


# ahead of patch_select's handler: it sees HF's `torch.where(mask, 0, finfo(float32).min)` first
HANDLERS.setdefault(torch.where, []).insert(0, ("patch_mask_fill_fp16", _mask_fill_handler))


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
