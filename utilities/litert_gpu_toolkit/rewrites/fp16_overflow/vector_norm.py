"""An L2 norm over many elements whose sum of squares leaves fp16's range: the scaled form.

`x.norm(p=2, dim=...)` (ConvNeXt-V2's global response normalisation: the norm of every channel over the whole
image) sums x*x over its dims. On the fp16 GPU that sum passes 65504 as soon as |x| reaches ~256 / sqrt(N) for
N summed elements -- 1.4 on a 56x56 map -- and returns inf, then NaN through the division that follows, at full
residency. Measured on llvmpipe, ai-edge-litert 2.3.0: timm's ConvNeXt-V2 with trained ranges planted, 548/548 ops
on the GPU, output non-finite, fp32 exact.

`patch_safe_vector_norm` (default, functional: handlers on torch.norm, Tensor.norm and torch.linalg.vector_norm
for p=2 over explicit dims holding at least 64 elements) computes it as s * sqrt(mean((x / s)^2)) * sqrt(N), with
s = max(max|x| over the dims, 1) (`row_scale`: a max cannot overflow) and the mean by `hierarchical_mean` (no
running sum is formed). Every term is at most 1, so only a norm that is itself past 65504 overflows. Exact to fp32
rounding (a few ulps: one division by s, the pooled mean's bound, one multiply); rows already within [-1, 1]
keep s = 1.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import Change, register
from ..functional import register_handler
from .norms import hierarchical_mean, row_scale

MIN_ELEMENTS = 64


def safe_vector_norm(x: torch.Tensor, dims, keepdim: bool = False) -> torch.Tensor:
    """The L2 norm of `x` over `dims` without an fp16 sum of squares (module docstring)."""
    dims = tuple(sorted(d % x.dim() for d in dims))
    n = math.prod(int(x.shape[d]) for d in dims)
    s = row_scale(x, dims)
    y = x / s
    out = s * torch.sqrt(hierarchical_mean(y * y, dims, keepdim=True)) * math.sqrt(n)
    return out if keepdim else out.squeeze(dims)


def _dims(dim, x: torch.Tensor):
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return dims if dims and all(isinstance(d, int) for d in dims) else None


def _route(x, p, dim, keepdim, dtype=None, out=None):
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or out is not None or dtype is not None:
        return NotImplemented
    if p not in (2, 2.0, "fro") or (p == "fro" and dim is None):
        return NotImplemented
    dims = _dims(dim, x)
    # a short norm cannot pass fp16's range unless its values are far past it (|x| > 256 / sqrt(N))
    if dims is None or math.prod(int(x.shape[d]) for d in dims) < MIN_ELEMENTS:
        return NotImplemented
    return safe_vector_norm(x, dims, keepdim=bool(keepdim))


@register_handler(torch.norm, "patch_safe_vector_norm")
@register_handler(torch.Tensor.norm, "patch_safe_vector_norm")
def _norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    return _route(input, p, dim, keepdim, dtype, out)


@register_handler(torch.linalg.vector_norm, "patch_safe_vector_norm")
def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    return _route(x, ord, dim, keepdim, dtype, out)


@register("patch_safe_vector_norm", wall="fp16_overflow")
def patch_safe_vector_norm(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
