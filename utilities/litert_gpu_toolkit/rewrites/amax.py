"""Wall `amax`: 'NHWC node rewriter not found: amax' at conversion (reduce-max over channels).

`patch_amax` computes the channel max as a max-pool over a transposed tensor (`channel_max`): exact.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .functional import register_handler
from .scoping import _is_number, _replace_modules, _scalar_value, scope_rewrites, scoped_rewrites  # noqa: F401


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
