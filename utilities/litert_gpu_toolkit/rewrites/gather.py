"""GATHER_ND walls: ops that the converter lowers to index gathers, which the GPU delegate rejects.

The wall (symptom `gather_nd`): "GATHER_ND: Operation is not supported." in the strict GPU
compile. Measured with litert-torch 0.10.0 / ai-edge-litert 2.3.0 (tests/test_rewrites_gather.py
keeps each statement honest):

  source                                   converts to                      rewrite here
  F.grid_sample                            GATHER_ND (+ rank 5, SELECT)     patch_grid_sample
  F.interpolate(mode="bicubic")            GATHER_ND (+ BROADCAST_TO)       patch_interpolate
  F.pad reflect / replicate on a 1-D axis,
    Conv1d(padding_mode="reflect") even
    at padding=0, any replicate pad        GATHER_ND                        patch_reflect_pad
  timm-style patch merging                 rank 6 (not a gather)            patch_patch_merging
  x[:, ::2], Focus stems                   STRIDED_SLICE: runs on the GPU   none needed
  MaxPool padding / ceil_mode              PADV2 + MAX_POOL_2D: runs        patch_maxpool_zeropad (constant-free form)
  bilinear align_corners=True              RESIZE_BILINEAR: runs            patch_interpolate(bilinear_align_corners=True)
  2-D reflect F.pad                        MIRROR_PAD: runs                 patch_reflect_pad (still applied; exact)

Every rewrite is a module patch (`patch_*(model) -> list[Change]`) plus, where torch has a
functional spelling, a handler that `GpuRewriteWrapper` applies during its forward only.
"""
from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import Change, named_modules_of, register, set_submodule
from .functional import HANDLERS, register_handler
from .rank import lowrank_permute

__all__ = [
    "pad_by_slices", "SliceConcatPadConv", "patch_reflect_pad",
    "maxpool_edge_pad", "EdgePadMaxPool", "patch_maxpool_zeropad",
    "resize_matrix", "interpolate_separable", "SeparableUpsample", "patch_interpolate",
    "grid_sample_dense", "patch_grid_sample",
    "space_to_depth_nhwc", "PatchMergingRank4", "patch_patch_merging",
]


def _tuple(v, n: int) -> tuple[int, ...]:
    return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * n


# ---------------------------------------------------------------------------------------------
# non-constant padding as slice + concat
# ---------------------------------------------------------------------------------------------

PAD_MODES = ("reflect", "replicate", "circular")


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


@register_handler(F.pad, "patch_reflect_pad")
def _pad_handler(input, pad, mode="constant", value=None):
    if mode not in PAD_MODES or input.dim() > 4 or any(int(p) < 0 for p in pad):
        return NotImplemented
    return pad_by_slices(input, pad, mode)


class SliceConcatPadConv(nn.Module):
    """A Conv1d / Conv2d with padding_mode reflect / replicate / circular, as explicit
    slice + concat padding followed by the same conv with no padding. Shares the original's
    weight and bias. Bit-exact padding; the conv is the original op. With padding 0 the pad step
    disappears (torch still routes such convs through F.pad, which is the GATHER_ND path)."""

    def __init__(self, conv: nn.Module):
        super().__init__()
        self.mode = conv.padding_mode
        self.pad = tuple(int(p) for p in conv._reversed_padding_repeated_twice)
        inner = type(conv)(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=0,
                           dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
                           device=conv.weight.device, dtype=conv.weight.dtype)
        inner.weight = conv.weight
        inner.bias = conv.bias
        self.conv = inner

    def forward(self, x):
        if any(self.pad):
            x = pad_by_slices(x, self.pad, self.mode)
        return self.conv(x)


@register("patch_reflect_pad", wall="gather_nd")
def patch_reflect_pad(model: nn.Module) -> list[Change]:
    """Conv1d / Conv2d with padding_mode reflect, replicate or circular (padding 0 included) ->
    `SliceConcatPadConv`. Bit-exact. The functional handler rewrites F.pad in those modes."""
    changes = []
    for path, m in named_modules_of(model, (nn.Conv1d, nn.Conv2d)):
        if path and m.padding_mode in PAD_MODES:
            set_submodule(model, path, SliceConcatPadConv(m))
            changes.append(Change(path, f"{type(m).__name__}(padding_mode={m.padding_mode!r}, padding={m.padding}) -> "
                                        "slice+concat pad + unpadded conv", "patch_reflect_pad", True))
    return changes


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
    k = _tuple(kernel_size, spatial)
    s = _tuple(stride if stride not in (None, [], ()) else k, spatial)
    p = _tuple(padding, spatial)
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
    return (any(_tuple(padding, 2)) or bool(ceil_mode)) and all(d == 1 for d in _tuple(dilation, 2)) \
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
        return list(_tuple(size, spatial)), [None] * spatial
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


# ---------------------------------------------------------------------------------------------
# Swin patch merging
# ---------------------------------------------------------------------------------------------

def space_to_depth_nhwc(x: torch.Tensor) -> torch.Tensor:
    """(B, H, W, C) -> (B, H/2, W/2, 4C) in Swin's order [x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2],
    x[1::2, 1::2]] (channel = (dw * 2 + dh) * C + c), at rank <= 4. Bit-exact."""
    b, h, w, c = (int(s) for s in x.shape)
    # elementary (b, h', dh, w', dw, c) -> (b, h', w', dw, dh, c)
    return lowrank_permute(x, (b, h // 2, 2, w // 2, 2, c), (0, 1, 3, 4, 2, 5), (b, h // 2, w // 2, 4 * c))


class PatchMergingRank4(nn.Module):
    """Swin patch merging (2x2 neighbourhood -> 4C channels -> norm / Linear(4C, 2C)) at rank <= 4.

    Handles (B, H*W, C) input with a stored `input_resolution` (original Swin) and (B, H, W, C)
    input (timm / torchvision, odd sizes zero-padded like they do), norm before (v1) or after (v2)
    the reduction. Bit-exact in the data movement; norm and Linear are the original modules.
    """

    def __init__(self, merge: nn.Module, norm_first: bool):
        super().__init__()
        self.reduction = merge.reduction
        self.norm = merge.norm
        self.norm_first = norm_first
        self.input_resolution = getattr(merge, "input_resolution", None)

    def forward(self, x):
        flat = x.dim() == 3
        if flat:
            h, w = self.input_resolution
            x = x.reshape(x.shape[0], h, w, x.shape[-1])
        b, h, w, c = (int(s) for s in x.shape)
        if h % 2 or w % 2:
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x = space_to_depth_nhwc(x)
        if flat:
            x = x.reshape(b, -1, 4 * c)
        if self.norm_first:
            return self.reduction(self.norm(x))
        return self.norm(self.reduction(x))


def _merge_layout(m: nn.Module) -> bool | None:
    """True: norm before reduction (Swin v1), False: after (Swin v2), None: not a patch merging."""
    red, norm = getattr(m, "reduction", None), getattr(m, "norm", None)
    if not type(m).__name__.endswith("PatchMerging") or not isinstance(red, nn.Linear) or norm is None:
        return None
    if red.in_features % 4:
        return None
    shape = tuple(getattr(norm, "normalized_shape", ()))
    if shape == (red.in_features,):
        return True
    if shape == (red.out_features,):
        return False
    return None


@register("patch_patch_merging", wall="rank_gt_4")
def patch_patch_merging(model: nn.Module) -> list[Change]:
    """Swin-style `*PatchMerging` modules (reduction: Linear(4C, .), norm over 4C or over the
    output) whose forward takes just x -> `PatchMergingRank4`. Bit-exact.

    Measured: the original Swin form (x[:, 0::2, 0::2, :] slices + cat) converts to STRIDED_SLICE
    and runs; timm's reshape(B, H/2, 2, W/2, 2, C).permute(...) form is a rank-6 wall. Both are
    replaced by the same rank-4 form.
    """
    import inspect

    changes = []
    for path, m in list(model.named_modules()):
        if not path:
            continue
        norm_first = _merge_layout(m)
        if norm_first is None:
            continue
        params = [p for p in inspect.signature(m.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        if len(params) != 1:
            continue
        set_submodule(model, path, PatchMergingRank4(m, norm_first))
        changes.append(Change(path, f"{type(m).__name__} -> rank-4 space-to-depth + "
                                    f"{'norm, reduction' if norm_first else 'reduction, norm'}",
                              "patch_patch_merging", True))
    return changes


# ---------------------------------------------------------------------------------------------
# torch.flip: REVERSE_V2 compiles GPU-only on the desktop GPU and returns wrong values
# ---------------------------------------------------------------------------------------------

def flip_by_slices(x: torch.Tensor, dims) -> torch.Tensor:
    """torch.flip as a concatenation of size-1 slices in reverse order, one axis at a time.

    Removes REVERSE_V2, which the desktop GPU accepts and computes wrongly (symptom `reverse_v2`).
    Bit-exact (a copy, any values incl. inf/NaN). Cost: one SLICE per element along each flipped
    axis plus one CONCATENATION -- fine for short axes (kernels, pads, small windows); for long
    axes prefer avoiding the flip in the model.
    """
    dims = [dims] if isinstance(dims, int) else list(dims)
    for d in dims:
        d = d % x.dim()
        n = x.shape[d]
        x = torch.cat([x.narrow(d, i, 1) for i in range(n - 1, -1, -1)], dim=d) if n > 1 else x
    return x


@register_handler(torch.flip, "patch_flip")
def _flip_handler(input, dims):
    return flip_by_slices(input, dims)


@register_handler(torch.Tensor.flip, "patch_flip")
def _tensor_flip_handler(self, *dims):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    return flip_by_slices(self, dims)


def patch_flip(model: nn.Module) -> list[Change]:
    """torch.flip has no module form: the rewrite happens inside `GpuRewriteWrapper` (handler
    "patch_flip") or by calling `flip_by_slices`. Returns no changes by itself."""
    return []


__all__ += ["flip_by_slices", "patch_flip"]


# ---------------------------------------------------------------------------------------------
# torch.gather with a runtime index (HF buffered token-type ids, position lookups)
# ---------------------------------------------------------------------------------------------

GATHER_MAX_ELEMENTS = 1 << 20


def gather_onehot(input: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """torch.gather(input, dim, index) as a one-hot product: no GATHER / GATHER_ND.

    out[..., s, ...] = sum_n input[..., n, ...] * (index[..., s, ...] == n), computed in float32 with
    EQUAL + one BATCH_MATMUL and cast back. Exactly one term is non-zero, so the result is exact for
    finite inputs (integers below 2^24 in magnitude: token types, positions, ids); a non-finite entry
    elsewhere on the gathered axis would turn its row into NaN (0 * inf). Index values outside
    [0, n) give 0 where torch raises."""
    dim = dim % input.dim()
    n = int(input.shape[dim])
    src = input.movedim(dim, -1).to(torch.float32)
    idx = index.movedim(dim, -1)
    if src.shape[:-1] != idx.shape[:-1]:
        src = src[tuple(slice(0, int(s)) for s in idx.shape[:-1])]
    onehot = (idx.unsqueeze(-1) == torch.arange(n, dtype=idx.dtype)).to(torch.float32)   # [..., S, n]
    out = torch.matmul(onehot, src.unsqueeze(-1)).squeeze(-1)
    return out.to(input.dtype).movedim(-1, dim)


def _gather_applies(input, dim, index) -> bool:
    return (isinstance(input, torch.Tensor) and isinstance(index, torch.Tensor) and isinstance(dim, int)
            and 1 <= input.dim() <= 3 and index.dim() == input.dim() and not input.dtype.is_complex
            and index.numel() * int(input.shape[dim]) <= GATHER_MAX_ELEMENTS
            and all(int(i) <= int(s) for d, (i, s) in enumerate(zip(index.shape, input.shape)) if d != dim % input.dim()))


@register_handler(torch.gather, "patch_gather_onehot")
@register_handler(torch.Tensor.gather, "patch_gather_onehot")
def _gather_handler(input, dim, index, *, sparse_grad=False, out=None):
    if out is not None or not _gather_applies(input, dim, index):
        return NotImplemented
    return gather_onehot(input, dim, index)


@register("patch_gather_onehot", wall="gather_nd")
def patch_gather_onehot(model: nn.Module) -> list[Change]:
    """torch.gather has no module form: the rewrite happens inside `GpuRewriteWrapper` /
    `convert_for_gpu` (handler "patch_gather_onehot") or by calling `gather_onehot`."""
    return []


__all__ += ["gather_onehot", "patch_gather_onehot"]


def _leading_index(src, key):
    """The integer index tensors of `src[key]` when `key` is advanced indexing on the leading dims only
    (`src[i]`, `src[i, j]`, `src[i, j, :]`, ...: tensors first, then only full slices), else None."""
    key = key if isinstance(key, tuple) else (key,)
    if not isinstance(src, torch.Tensor) or src.dtype.is_complex:
        return None
    k = 0
    while k < len(key) and isinstance(key[k], torch.Tensor):
        if key[k].dtype not in (torch.int64, torch.int32):
            return None
        k += 1
    if k == 0 or k > src.dim() or not all(r == slice(None) or r is Ellipsis for r in key[k:]):
        return None
    return list(key[:k])


def index_onehot(src: torch.Tensor, indices: list[torch.Tensor]) -> torch.Tensor:
    """`src[i0, i1, ..., ik-1]` (integer tensors on the leading dims, broadcast together) as a one-hot
    product: no GATHER / GATHER_ND.

    The indices are folded into one flat index f = i0 * s1 * ... + i1 * s2 * ... + ... over the leading
    N = s0 * ... * sk-1 rows; out = sum_n (f == n) * src.reshape(N, -1)[n], in float32, cast back (bool:
    > 0.5). Exactly one term is non-zero, so the result is exact for finite values (integers below 2^24
    in magnitude, bools); a non-finite row of `src` would turn every output into NaN (0 * inf).
    Negative indices wrap as in torch; out-of-range ones give 0 where torch raises. This is the
    `padding_mask[batch_idx, kv_idx]` of Hugging Face's attention-mask building."""
    k = len(indices)
    lead = [int(d) for d in src.shape[:k]]
    rest = src.shape[k:]
    flat = None
    for d, idx in enumerate(indices):
        idx = idx.to(torch.int32)
        idx = idx + (idx < 0).to(torch.int32) * lead[d]
        stride = math.prod(lead[d + 1:])
        term = idx * stride if stride != 1 else idx
        flat = term if flat is None else flat + term
    n = math.prod(lead)
    table = src.reshape(n, -1).to(torch.float32)                                        # [N, R]
    shape = flat.shape
    # one 2-D one-hot [rows, N] whatever the index rank (a rank-4 index would make a rank-5 one-hot)
    onehot = (flat.reshape(-1, 1) == torch.arange(n, dtype=torch.int32)).to(torch.float32)
    # MUL + SUM, not a matmul: the GPU delegate refuses BATCH_MATMUL of two runtime tensors at this rank
    out = (onehot.unsqueeze(-1) * table.unsqueeze(0)).sum(1).reshape(*shape, *rest)
    return out > 0.5 if src.dtype == torch.bool else out.to(src.dtype)


@register_handler(torch.Tensor.__getitem__, "patch_index_onehot")
def _index_handler(src, key):
    indices = _leading_index(src, key)
    if indices is None:
        return NotImplemented
    try:
        shape = torch.broadcast_shapes(*(i.shape for i in indices))
    except RuntimeError:
        return NotImplemented
    n = math.prod(int(s) for s in src.shape[:len(indices)])
    rows = math.prod(int(s) for s in shape)
    width = src.numel() // max(n, 1)
    if n == 0 or rows * n * max(width, 1) > GATHER_MAX_ELEMENTS:
        return NotImplemented
    return index_onehot(src, list(indices))


@register("patch_index_onehot", wall="gather_nd", default=False)
def patch_index_onehot(model: nn.Module) -> list[Change]:
    """Indexing with integer tensors has no module form: the rewrite happens inside `GpuRewriteWrapper` /
    `convert_for_gpu(..., include=["patch_index_onehot"])` (handler "patch_index_onehot") or by calling
    `index_onehot`. Opt-in: it was added after the zoo's measured run, and it also rewrites indexing of
    constant tables (e.g. relative-position biases) that the converter would otherwise fold."""
    return []


__all__ += ["index_onehot", "patch_index_onehot"]


# ---------------------------------------------------------------------------------------------
# a resize to the size the tensor already has (position tables "resized" to their own grid)
# ---------------------------------------------------------------------------------------------

_IDENTITY_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


def is_identity_resize(x: torch.Tensor, size=None, scale_factor=None, mode: str = "nearest",
                       align_corners=None, antialias: bool = False) -> bool:
    """True when F.interpolate(x, ...) returns x unchanged: the output size equals the input size and
    the coordinate scale is 1 (a `size` given, or every scale factor exactly 1). Then every output
    sample sits exactly on an input sample (weights 1 and 0) in every listed mode."""
    if not isinstance(x, torch.Tensor) or x.dim() < 3 or mode not in _IDENTITY_MODES:
        return False
    spatial = x.dim() - 2
    in_size = [int(d) for d in x.shape[2:]]
    if size is not None:
        return scale_factor is None and list(_tuple(size, spatial)) == in_size
    if scale_factor is None:
        return False
    scales = scale_factor if isinstance(scale_factor, (tuple, list)) else [scale_factor] * spatial
    return all(float(s) == 1.0 for s in scales)


def _identity_resize_handler(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                             recompute_scale_factor=None, antialias=False):
    if not is_identity_resize(input, size, scale_factor, mode, align_corners, antialias):
        return NotImplemented
    return input


# first in line for F.interpolate: an identity needs no separable matmuls either
HANDLERS.setdefault(F.interpolate, []).insert(0, ("patch_identity_resize", _identity_resize_handler))


@register("patch_identity_resize", wall="constant_resize")
def patch_identity_resize(model: nn.Module) -> list[Change]:
    """F.interpolate to the size the tensor already has -> the tensor itself (exact, bit for bit).

    ViT-family models (DPT, ...) "resize" their constant position table to the patch grid on every
    forward; when the grid is the table's own size, the converter still emits a RESIZE_BILINEAR on a
    constant, which the GPU rejects ('no runtime input'). Functional only (handler
    "patch_identity_resize"); returns no changes by itself."""
    return []


__all__ += ["is_identity_resize", "patch_identity_resize"]
