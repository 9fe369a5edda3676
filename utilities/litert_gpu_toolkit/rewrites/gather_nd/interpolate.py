"""Bicubic / align_corners interpolation as two small matmuls (separable resize), no GATHER_ND.

Exact to fp32 rounding: the same weights as torch's kernels, summed in another order.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import Change, named_modules_of, register, set_submodule
from ..functional import register_handler
from ..shared import per_axis


# ---------------------------------------------------------------------------------------------
# bicubic / align_corners interpolation as constant separable matrices
# ---------------------------------------------------------------------------------------------

_CUBIC_A = -0.75


def _cubic_weights(t: float) -> tuple[float, float, float, float]:
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):   # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)


@functools.lru_cache(maxsize=256)
def resize_matrix(in_size: int, out_size: int, mode: str, align_corners: bool,
                  scale: float | None = None) -> np.ndarray:
    """The (out_size, in_size) matrix M with out = M @ in along one axis, following torch's
    upsample_{bilinear,bicubic}2d rules: source index, clamped taps (cubic, A = -0.75), and the
    scale (`scale` = the scale factor torch was given, else in/out). Computed in float64."""
    m = np.zeros((out_size, in_size), dtype=np.float64)
    if align_corners:
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    else:
        ratio = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    for o in range(out_size):
        src = ratio * o if align_corners else ratio * (o + 0.5) - 0.5
        if mode == "bicubic":
            base = math.floor(src)
            for k, w in enumerate(_cubic_weights(src - base)):
                m[o, min(max(base - 1 + k, 0), in_size - 1)] += w
        elif mode == "bilinear":
            src = max(src, 0.0)
            i0 = int(src)
            lam = src - i0
            i1 = i0 + (1 if i0 < in_size - 1 else 0)
            m[o, i0] += 1.0 - lam
            m[o, i1] += lam
        else:
            raise ValueError(f"mode {mode!r} is not separable here")
    return m


def _output_size(x: torch.Tensor, size, scale_factor, recompute_scale_factor):
    spatial = x.dim() - 2
    if size is not None:
        return list(per_axis(size, spatial)), [None] * spatial
    scales = [float(s) for s in (scale_factor if isinstance(scale_factor, (tuple, list)) else [scale_factor] * spatial)]
    out = [int(math.floor(float(x.shape[2 + i]) * scales[i])) for i in range(spatial)]
    return out, ([None] * spatial if recompute_scale_factor else scales)


def interpolate_separable(x: torch.Tensor, size=None, scale_factor=None, mode: str = "bicubic",
                          align_corners: bool | None = None, recompute_scale_factor: bool | None = None
                          ) -> torch.Tensor:
    """F.interpolate for 4-D input, mode bicubic or bilinear, as out = A_h @ x @ A_w^T with constant
    matrices (two MatMuls). align_corners is honoured as given (never switched).

    Exact to fp32 rounding (|diff| <= ~1e-6 * max|x|): the weights are torch's, computed in
    float64, and only their summation order differs. Cost: constants of (Ho*H + Wo*W) floats;
    N*C*(H*W*Wo + Ho*H*Wo) multiply-adds -- dense, so heavier than the 4x4 taps it replaces;
    use it where the gather is the wall.
    """
    if x.dim() != 4:
        raise ValueError("interpolate_separable takes NCHW input")
    align = bool(align_corners)
    (ho, wo), (sh, sw) = _output_size(x, size, scale_factor, recompute_scale_factor)
    h, w = int(x.shape[2]), int(x.shape[3])
    a_w = torch.from_numpy(resize_matrix(w, wo, mode, align, sw).T.astype(np.float32)).to(x.dtype)   # (W, Wo)
    a_h = torch.from_numpy(resize_matrix(h, ho, mode, align, sh).T.astype(np.float32)).to(x.dtype)   # (H, Ho)
    y = torch.matmul(x, a_w)                                   # (N, C, H, Wo)
    y = torch.matmul(y.transpose(2, 3), a_h)                   # (N, C, Wo, Ho)
    return y.transpose(2, 3)


def _interp_applies(x, mode, align_corners, antialias, bilinear_align_corners: bool) -> bool:
    if x.dim() != 4 or antialias:
        return False
    return mode == "bicubic" or (bilinear_align_corners and mode == "bilinear" and bool(align_corners))


@register_handler(F.interpolate, "patch_interpolate")
def _interpolate_handler(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                         recompute_scale_factor=None, antialias=False):
    if not _interp_applies(input, mode, align_corners, antialias, bilinear_align_corners=False):
        return NotImplemented
    return interpolate_separable(input, size, scale_factor, mode, align_corners, recompute_scale_factor)


class SeparableUpsample(nn.Module):
    """Drop-in for nn.Upsample(mode bicubic / bilinear) computed by `interpolate_separable`."""

    def __init__(self, up: nn.Upsample):
        super().__init__()
        self.size, self.scale_factor, self.mode = up.size, up.scale_factor, up.mode
        self.align_corners = up.align_corners
        self.recompute_scale_factor = getattr(up, "recompute_scale_factor", None)

    def forward(self, x):
        return interpolate_separable(x, self.size, self.scale_factor, self.mode, self.align_corners,
                                     self.recompute_scale_factor)


@register("patch_interpolate", wall="gather_nd")
def patch_interpolate(model: nn.Module, bilinear_align_corners: bool = False) -> list[Change]:
    """nn.Upsample(mode="bicubic") -> `SeparableUpsample` (constant separable matrices, exact to
    fp32 rounding). bilinear with align_corners=True is rewritten too when
    `bilinear_align_corners=True`: it is not a wall on llvmpipe (RESIZE_BILINEAR runs there), so
    it is opt-in. The functional handler rewrites F.interpolate(mode="bicubic")."""
    changes = []
    for path, m in named_modules_of(model, nn.Upsample):
        if not path or not _interp_applies(torch.empty(1, 1, 1, 1), m.mode, m.align_corners, False,
                                           bilinear_align_corners):
            continue
        set_submodule(model, path, SeparableUpsample(m))
        changes.append(Change(path, f"Upsample(mode={m.mode!r}, align_corners={m.align_corners}) -> "
                                    "constant separable matmuls", "patch_interpolate", True))
    return changes
