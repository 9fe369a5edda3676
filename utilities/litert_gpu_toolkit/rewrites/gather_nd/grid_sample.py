"""F.grid_sample as dense one-hot weights (bilinear / nearest), no GATHER_ND.

Exact to fp32 rounding for the supported modes.
"""
from __future__ import annotations


import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, register
from ..functional import register_handler


# ---------------------------------------------------------------------------------------------
# grid_sample as separable "tent" weights and matmuls
# ---------------------------------------------------------------------------------------------

def _unnormalize(coord: torch.Tensor, size: int, align_corners: bool) -> torch.Tensor:
    # the same operations, in the same order, as torch's grid_sampler_unnormalize
    if align_corners:
        return ((coord + 1) / 2) * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _axis_weights(coord: torch.Tensor, size: int, mode: str, padding_mode: str, align_corners: bool) -> torch.Tensor:
    """(N, P) normalised coordinates -> (N, P, size) sampling weights along one axis."""
    pos = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        pos = torch.clamp(pos, 0, size - 1)
    if mode == "nearest":
        pos = torch.round(pos)                     # half to even, like torch's nearbyint
    taps = torch.arange(size, dtype=pos.dtype).reshape(1, 1, size)
    return torch.relu(1 - torch.abs(pos.unsqueeze(-1) - taps))


def grid_sample_dense(x: torch.Tensor, grid: torch.Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                      align_corners: bool | None = None) -> torch.Tensor:
    """F.grid_sample for 4-D input without gathers, all tensors at rank <= 4.

    Per axis, the weight of input column j for a sample at unnormalised position u is the tent
    relu(1 - |u - j|): exactly torch's two bilinear weights for the in-range neighbours and 0 for
    every other column, so zeros padding falls out for free; border padding clamps u first;
    nearest rounds u (half to even) so the tent is one-hot. The sample is then
    sum_i wy[i] * sum_j wx[j] * x[i, j]: one batched matmul over the longer axis and a weighted
    sum over the shorter one.

    Exact to fp32 rounding (<= ~1e-6 * max|x|). Domain: bilinear / nearest, zeros / border
    padding, align_corners True / False; 'reflection' padding, bicubic and 5-D input are not
    covered. Memory: weights N*P*(H + W) and an intermediate N*C*min(H, W)*P floats, with
    P = grid points (the dense tent form would need N*P*H*W); compute N*C*H*W*P multiply-adds.
    Positions are computed in the GPU's precision: in fp16 a coordinate is resolved to about
    size * 2^-11 pixels.
    """
    if x.dim() != 4 or grid.dim() != 4:
        raise ValueError("grid_sample_dense takes 4-D input and grid")
    align = bool(align_corners)
    n, c, h, w = (int(s) for s in x.shape)
    hg, wg = int(grid.shape[1]), int(grid.shape[2])
    p = hg * wg
    gx = grid[..., 0].reshape(n, p)
    gy = grid[..., 1].reshape(n, p)
    wx = _axis_weights(gx, w, mode, padding_mode, align)     # (N, P, W)
    wy = _axis_weights(gy, h, mode, padding_mode, align)     # (N, P, H)
    if h > w:                                                 # contract the longer axis by matmul
        x = x.transpose(2, 3)
        wx, wy, h, w = wy, wx, w, h
    t = torch.matmul(x.reshape(n, c * h, w), wx.transpose(1, 2))          # (N, C*H, P)
    out = (t.reshape(n, c, h, p) * wy.transpose(1, 2).unsqueeze(1)).sum(2)  # (N, C, P)
    return out.reshape(n, c, hg, wg)


def _grid_applies(input, grid, mode, padding_mode) -> bool:
    return input.dim() == 4 and grid.dim() == 4 and mode in ("bilinear", "nearest") \
        and padding_mode in ("zeros", "border")


@register_handler(F.grid_sample, "patch_grid_sample")
def _grid_sample_handler(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    if not _grid_applies(input, grid, mode, padding_mode):
        return NotImplemented
    return grid_sample_dense(input, grid, mode, padding_mode, align_corners)


@register("patch_grid_sample", wall="gather_nd")
def patch_grid_sample(model: nn.Module) -> list[Change]:
    """grid_sample has no nn.Module form in torch, so there is nothing to replace in the module
    tree: this patch returns no changes. The rewrite is the functional handler of the same name,
    which turns every F.grid_sample call made inside `GpuRewriteWrapper(model)` into
    `grid_sample_dense` (call that directly in code you own)."""
    return []
