"""Softmax over a fully masked row: uniform in torch, NaN on the fp16 GPU.

An additive attention mask holds finfo(float32).min (Hugging Face) or -inf at the masked positions. In
fp32 a row whose every position is masked (a padded query under a sliding-window or causal-and-padding
mask) is s + finfo.min == finfo.min everywhere -- the score is absorbed -- so torch's softmax gives the
row uniform weights. On the fp16 GPU those entries are -inf, the row max is -inf and softmax computes
-inf - -inf: NaN, which then spreads through every later layer (a mean pool multiplies it by 0: still NaN).
Measured on llvmpipe, ai-edge-litert 2.3.0: ModernBERT with a padding mask, 194/194 ops on the GPU, the
padded rows of the output all NaN.

`patch_safe_softmax` (default on) computes softmax(max(x, -65504)) -- one MAXIMUM with a scalar ahead of
the SOFTMAX. Exact: equal to torch's softmax bit for bit on every row whose largest entry is above
about -65400 (a masked entry becomes -65504 and exp(-65504 - max) underflows to 0, as exp(finfo.min)
does), and on a fully masked row of an finfo.min mask (all entries equal: uniform in both). A row of
-inf entries is NaN in torch and uniform here. Rows lying entirely below -65504 with unequal entries
are the one case that changes (none occurs in a masked softmax). Functional only (handlers on
torch.softmax / F.softmax / Tensor.softmax; nn.Softmax calls F.softmax).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import Change, register
from ..functional import register_handler
from .mask_fill import FP16_MAX


def safe_softmax(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.softmax(x, dim, dtype) with x floored at -65504 first (fp16's lowest finite value)."""
    if dtype is not None:
        x = x.to(dtype)
    return torch.softmax(torch.clamp(x, min=-FP16_MAX), dim)


def _handler(input, *args, **kwargs):
    if not isinstance(input, torch.Tensor) or not input.dtype.is_floating_point or kwargs.get("out") is not None:
        return NotImplemented
    dim = args[0] if args else kwargs.get("dim")
    if len(args) > 2 or "_stacklevel" in kwargs:                       # F.softmax(x, dim, _stacklevel, dtype)
        dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    else:
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    if not isinstance(dim, int) or (dtype is not None and not isinstance(dtype, torch.dtype)):
        return NotImplemented
    return safe_softmax(input, dim, dtype)


for _fn in (F.softmax, torch.softmax, torch.Tensor.softmax):
    register_handler(_fn, "patch_safe_softmax")(_handler)


@register("patch_safe_softmax", wall="fp16_overflow")
def patch_safe_softmax(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
