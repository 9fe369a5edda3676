"""MaxPool with zero padding / ceil_mode as an explicit edge pad (the padded pool lowers to GATHER_ND).

Bit-exact: the pad repeats edge values, which can never win a max over a window that holds them.
"""
from __future__ import annotations


import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, named_modules_of, register, set_submodule
from ..functional import register_handler
from .reflect_pad import _pad_axis
from ..shared import per_axis


# ---------------------------------------------------------------------------------------------
# max pooling without a padding constant
# ---------------------------------------------------------------------------------------------

def _pool_out_size(n: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """torch's pooling output length (dilation 1)."""
    out = (n + 2 * p - k + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def maxpool_edge_pad(x: torch.Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                     spatial: int | None = None) -> torch.Tensor:
    """max_pool1d / max_pool2d (dilation 1) with padding and ceil_mode done by edge replication.

    Every pooling window that touches padding also contains the edge element it would copy
    (windows are contiguous, padding <= kernel/2, and a ceil_mode window starts inside the input),
    so the max is unchanged: bit-exact for ANY input, negatives, +-inf and NaN included. The
    padded map is then pooled with padding 0 and ceil_mode False; the right edge is padded or
    cropped so the window count equals torch's. No -inf / lowest-float constant enters the graph.
    """
    spatial = spatial or (2 if x.dim() == 4 else 1)     # pooled axes: the last `spatial` ones
    k = per_axis(kernel_size, spatial)
    s = per_axis(stride if stride not in (None, [], ()) else k, spatial)
    p = per_axis(padding, spatial)
    y = x
    for i in range(spatial):
        dim = x.dim() - spatial + i
        n = x.shape[dim]
        out = _pool_out_size(n, k[i], s[i], p[i], ceil_mode)
        needed = (out - 1) * s[i] + k[i]
        right = max(needed - n - p[i], 0)
        if p[i] or right:
            y = _pad_axis(y, dim, p[i], right, "replicate")
        if y.shape[dim] > needed:
            y = y.narrow(dim, 0, needed)
    pool = F.max_pool2d if spatial == 2 else F.max_pool1d
    return pool(y, k, s, 0, 1, False)


class EdgePadMaxPool(nn.Module):
    """Drop-in for nn.MaxPool1d / nn.MaxPool2d with padding or ceil_mode (dilation 1): see
    `maxpool_edge_pad`."""

    def __init__(self, pool: nn.Module):
        super().__init__()
        self.kernel_size, self.stride, self.padding = pool.kernel_size, pool.stride, pool.padding
        self.ceil_mode = bool(pool.ceil_mode)
        self.spatial = 2 if isinstance(pool, nn.MaxPool2d) else 1

    def forward(self, x):
        return maxpool_edge_pad(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.spatial)


def _pool_applies(padding, ceil_mode, dilation, return_indices) -> bool:
    return (any(per_axis(padding, 2)) or bool(ceil_mode)) and all(d == 1 for d in per_axis(dilation, 2)) \
        and not return_indices


@register("patch_maxpool_zeropad", wall="gather_nd")
def patch_maxpool_zeropad(model: nn.Module) -> list[Change]:
    """nn.MaxPool1d / nn.MaxPool2d with padding > 0 or ceil_mode=True (dilation 1, no indices) ->
    `EdgePadMaxPool`: explicit edge-replicated padding + unpadded pooling. Bit-exact for any input.

    The spec's name is kept; the padding is not zeros (zeros are wrong for negative inputs) but
    copies of the edge, which can never win a window they were not already in. On litert-torch
    0.10.0 + llvmpipe the plain op (PADV2 with a lowest-float constant + MAX_POOL_2D) already runs
    on the GPU and matches; this form removes the constant and any converter-side padding path.
    """
    changes = []
    for path, m in named_modules_of(model, (nn.MaxPool1d, nn.MaxPool2d)):
        if path and _pool_applies(m.padding, m.ceil_mode, m.dilation, m.return_indices):
            set_submodule(model, path, EdgePadMaxPool(m))
            changes.append(Change(path, f"{type(m).__name__}(k={m.kernel_size}, s={m.stride}, p={m.padding}, "
                                        f"ceil_mode={m.ceil_mode}) -> edge-replicated pad + unpadded max pool",
                                  "patch_maxpool_zeropad", True))
    return changes


def _maxpool_handler(spatial: int):
    def handler(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        if input.dim() not in (spatial + 1, spatial + 2) or \
                not _pool_applies(padding, ceil_mode, dilation, return_indices):
            return NotImplemented
        return maxpool_edge_pad(input, kernel_size, stride, padding, ceil_mode, spatial)
    return handler


register_handler(F.max_pool2d, "patch_maxpool_zeropad")(_maxpool_handler(2))
register_handler(F.max_pool1d, "patch_maxpool_zeropad")(_maxpool_handler(1))
