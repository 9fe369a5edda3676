"""Wall `cumsum`: CUMSUM rejected by the GPU delegate ('indices must be constant int32 type').

Hugging Face text models build position ids from the input ids at run time
(`create_position_ids_from_input_ids`: mask = ids != pad; cumsum(mask) * mask + pad, RoBERTa,
XLM-R, CamemBERT, ...), and causal / padding masks are often built with a cumsum too. CUMSUM has no
GPU kernel. A cumulative sum along an axis of length n is a product with a constant triangular
matrix of ones:

    cumsum(x, dim)[..., j] = sum_{i <= j} x[..., i] = (x @ U)[..., j],   U[i, j] = 1 if i <= j

`cumsum_matmul` computes it in float32 (one FULLY_CONNECTED / BATCH_MATMUL) and casts back to the
input's dtype. Bound: integer inputs are exact while every partial sum stays below 2^24 in magnitude
(counts of tokens, always); float inputs agree to fp32 summation-order rounding. Axes longer than
`MAX_LEN` are left alone (the n x n constant would dominate the file).
"""
from __future__ import annotations

import torch
from torch import nn

from . import Change, register
from .functional import register_handler


MAX_LEN = 2048


def cumsum_matmul(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.cumsum(x, dim) as x @ triu(ones(n, n)) in float32, cast back to `dtype` (or x's dtype)."""
    out_dtype = dtype or (torch.int64 if x.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16,
                                                     torch.int32) else x.dtype)
    dim = dim % x.dim()
    n = int(x.shape[dim])
    upper = torch.triu(torch.ones(n, n, dtype=torch.float32))
    moved = x.movedim(dim, -1).to(torch.float32)
    out = torch.matmul(moved, upper)
    return out.movedim(-1, dim).to(out_dtype)


def _applies(x, dim) -> bool:
    return (isinstance(x, torch.Tensor) and isinstance(dim, int) and x.dim() >= 1
            and 1 < int(x.shape[dim]) <= MAX_LEN and not x.dtype.is_complex)


@register_handler(torch.cumsum, "patch_cumsum")
@register_handler(torch.Tensor.cumsum, "patch_cumsum")
def _cumsum_handler(input, dim, *, dtype=None, out=None):
    if out is not None or not _applies(input, dim):
        return NotImplemented
    return cumsum_matmul(input, dim, dtype)


@register("patch_cumsum", wall="cumsum")
def patch_cumsum(model: nn.Module) -> list[Change]:
    """torch.cumsum has no module form: the rewrite happens inside `GpuRewriteWrapper` /
    `convert_for_gpu` (handler "patch_cumsum") or by calling `cumsum_matmul`."""
    return []
