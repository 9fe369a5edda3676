"""Wall `avg_pool`: padded average pooling, computed wrongly or rejected by the GPU.

Measured on llvmpipe, ai-edge-litert 2.3.0 (tests/toolkit/rewrites/test_avg_pool.py): `nn.AvgPool2d(3, 2, 1)`
converts to PAD + AVERAGE_POOL_2D, which runs GPU-only and returns wrong numbers in fp16 and fp32 (corr 0.968,
errors near the borders: the padded zeros are not averaged in); with `count_include_pad=False` the converter
emits STABLEHLO_REDUCE_WINDOW, which the GPU rejects. Unpadded pools are right. Seen in timm's ResNeSt
(`avd` pooling, corr 0.95 after one block) and Inception-style branches.

`patch_avg_pool` (default, functional) writes a padded / ceil-mode `F.avg_pool2d` (and `avg_pool1d`) as a
window sum -- a depthwise convolution with a ones kernel over the zero-padded input -- divided by the
divisor torch uses at each output position (a constant computed once by torch: the window's element count,
with or without the padding, or `divisor_override`). Exact to fp32 rounding (a sum of k*k terms, then one
division, instead of torch's average).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register
from .functional import register_handler
from .shared import constant, real_values
def _pair(v, n: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _out_size(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    n = (size + 2 * p - k + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (n - 1) * s >= size + p:          # torch: the last window must start inside the input
        n -= 1
    return n


def avg_pool2d_as_conv(x: torch.Tensor, kernel_size, stride=None, padding=0, ceil_mode=False,
                       count_include_pad=True, divisor_override=None) -> torch.Tensor:
    """F.avg_pool2d(x, ...) for x [N, C, H, W] as a depthwise ones-kernel convolution over the zero-padded input,
    divided by torch's per-position divisor (a constant)."""
    k = _pair(kernel_size, 2)
    s = _pair(stride if stride not in (None, []) else kernel_size, 2)
    p = _pair(padding, 2)
    n, c, h, w = (int(d) for d in x.shape)
    ho, wo = _out_size(h, k[0], s[0], p[0], ceil_mode), _out_size(w, k[1], s[1], p[1], ceil_mode)
    # one window longer than the padded input (Hugging Face EfficientNet's AvgPool2d(1280, ceil_mode=True) on a
    # 7x7 map): past the input it sums zeros, so it is the padded input's length -- the same sum, and no
    # 1280x1280 ones kernel per channel (8.4 GB)
    torch_k = k
    k = tuple(min(kk, size + 2 * pp) if n_out == 1 else kk for kk, size, pp, n_out in zip(k, (h, w), p, (ho, wo)))
    # zeros on the far side so the convolution produces torch's (ceil-mode) output size
    extra_h = max(0, (ho - 1) * s[0] + k[0] - (h + 2 * p[0]))
    extra_w = max(0, (wo - 1) * s[1] + k[1] - (w + 2 * p[1]))
    if extra_h or extra_w:
        x = F.pad(x, (0, extra_w, 0, extra_h))
    with real_values(), torch.no_grad():                # constants, computed by torch outside any trace
        ones = torch.ones(c, 1, k[0], k[1], dtype=x.dtype)
        plane = torch.ones(1, 1, h, w, dtype=torch.float64)
        real = F.conv2d(F.pad(plane, (0, extra_w, 0, extra_h)), torch.ones(1, 1, *k, dtype=torch.float64),
                        stride=s, padding=p)[..., :ho, :wo]
        mean_of_ones = F.avg_pool2d(plane, torch_k, s, p, ceil_mode, count_include_pad, divisor_override)
        divisor = (real / mean_of_ones).round().to(x.dtype)  # what torch divides each window sum by
    total = F.conv2d(x, constant(ones), stride=s, padding=p, groups=c)[..., :ho, :wo]
    return total / constant(divisor)


def _needs_rewrite(x, kernel_size, stride, padding, ceil_mode) -> bool:
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or not x.dtype.is_floating_point:
        return False
    k = _pair(kernel_size, 2)
    s = _pair(stride if stride not in (None, []) else kernel_size, 2)
    p = _pair(padding, 2)
    if any(p) or not all(isinstance(v, int) for v in (*k, *s, *p)):
        return any(p)
    h, w = int(x.shape[2]), int(x.shape[3])
    return ceil_mode and ((h - k[0]) % s[0] or (w - k[1]) % s[1])      # a ceil-mode overhang


@register_handler(F.avg_pool2d, "patch_avg_pool")
def _avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if not _needs_rewrite(input, kernel_size, stride, padding, ceil_mode):
        return NotImplemented
    return avg_pool2d_as_conv(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@register_handler(F.avg_pool1d, "patch_avg_pool")
def _avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    k, s = _pair(kernel_size, 1)[0], _pair(stride if stride not in (None, []) else kernel_size, 1)[0]
    p = _pair(padding, 1)[0]
    if not isinstance(input, torch.Tensor) or input.dim() != 3:
        return NotImplemented
    x4 = input.unsqueeze(2)
    if not _needs_rewrite(x4, (1, k), (1, s), (0, p), ceil_mode):
        return NotImplemented
    return avg_pool2d_as_conv(x4, (1, k), (1, s), (0, p), ceil_mode, count_include_pad).squeeze(2)


@register("patch_avg_pool", wall="avg_pool")
def patch_avg_pool(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []

