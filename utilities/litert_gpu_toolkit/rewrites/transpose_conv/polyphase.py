"""Transposed conv as stride-many small convs whose outputs are interleaved (polyphase).

Exact to fp32 rounding; no zero-stuffed MACs.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .spec import (ConvTAttributes, ConvTSpec, _batched, _fmt, _output_padding, _pad_or_crop, conv_per_group,
                   interleave_phases)
from .zero_stuff import _from_conv_transpose


# -------------------------------------------------------------------------------------- polyphase

def polyphase_weight(weight: torch.Tensor, spec: ConvTSpec, order: str = "channel") -> torch.Tensor:
    """ConvTranspose weight [C_in, C_out/g, *k] -> polyphase conv weight [C_out * phases, C_in/g, *taps].

    Output channel c * phases + phase (order="channel") or phase * C_out + c (order="phase", groups == 1
    only), phase = row-major index over the per-axis strides; tap v of phase r reads kernel tap
    (m - 1 - v) * s + r of the dilated, zero-padded kernel.
    """
    g, nd = spec.groups, spec.ndim
    if order == "phase" and g != 1:
        raise ValueError("phase-major order needs groups == 1 (group outputs must stay contiguous)")
    cig, cog = spec.in_channels // g, spec.out_channels // g
    w = weight.detach()
    if any(d != 1 for d in spec.dilation):                      # write dilation out as zero taps
        dense = w.new_zeros(*w.shape[:2], *spec.dense_kernel)
        index = (slice(None), slice(None)) + tuple(slice(None, None, d) for d in spec.dilation)
        dense[index] = w
        w = dense
    taps = spec.taps
    pad = [v for k, m, s in reversed(list(zip(spec.dense_kernel, taps, spec.stride))) for v in (0, m * s - k)]
    w = F.pad(w, pad)                                            # kernel -> multiple of the stride
    if nd == 1:
        (m,), (s,) = taps, spec.stride
        w = w.reshape(g, cig, cog, m, s).flip(3)                 # [g, Cig, Cog, v, r]
        perm = (4, 0, 2, 1, 3) if order == "phase" else (0, 2, 4, 1, 3)   # [r, g, Cog, ..] / [g, Cog, r, ..]
        return w.permute(*perm).reshape(spec.out_channels * s, cig, m).contiguous()
    (mh, mw), (sh, sw) = taps, spec.stride
    w = w.reshape(g, cig, cog, mh, sh, mw, sw).flip(3, 5)        # [g, Cig, Cog, vh, rh, vw, rw]
    perm = (4, 6, 0, 2, 1, 3, 5) if order == "phase" else (0, 2, 4, 6, 1, 3, 5)
    return w.permute(*perm).reshape(spec.out_channels * sh * sw, cig, mh, mw).contiguous()


def polyphase_forward(x: torch.Tensor, weight: torch.Tensor, phase_bias: torch.Tensor | None,
                      bias: torch.Tensor | None, spec: ConvTSpec, order: str, output_size=None) -> torch.Tensor:
    """The transposed conv `spec` of x, given its polyphase conv weight (`polyphase_weight` layout, `order`),
    the bias repeated per phase in the same order, and the plain bias (for rows past the kernel)."""
    x, unbatched = _batched(x, spec.ndim)
    op = _output_padding(spec, x, output_size)
    in_size = tuple(x.shape[2:])
    out_size = spec.out_size(in_size, op)
    # Phase rows q = 0 .. n + m - 2 cover output positions q*s + r; keep only the rows the crop needs.
    lo_rows = [min(m - 1, p // s) for m, p, s in zip(spec.taps, spec.padding, spec.stride)]
    need_rows = [-(-(p + o) // s) - lo for p, o, s, lo in zip(spec.padding, out_size, spec.stride, lo_rows)]
    in_pads = [(m - 1 - lo, min(m - 1, r + lo - n)) for m, lo, r, n in zip(spec.taps, lo_rows, need_rows, in_size)]
    short = [r - (n + lo_p + hi_p - m + 1) for r, n, (lo_p, hi_p), m in zip(need_rows, in_size, in_pads, spec.taps)]
    late_bias = any(v > 0 for v in short)                   # output_padding beyond the kernel: bias-only rows
    values = {v for pr in in_pads for v in pr}
    conv_pad = values.pop() if len(values) == 1 and min(values) > 0 else 0
    if not conv_pad:
        x = _pad_or_crop(x, in_pads)
    z = conv_per_group(x, weight, None if late_bias else phase_bias, spec.groups, conv_pad)
    y = interleave_phases(z, spec.stride, order)
    crops = [(-(p - lo * s), 0) for p, lo, s in zip(spec.padding, lo_rows, spec.stride)]
    y = _pad_or_crop(y, crops)
    y = _pad_or_crop(y, [(0, o - n) for o, n in zip(out_size, y.shape[2:])])
    if late_bias and bias is not None:
        y = y + bias.reshape(-1, *([1] * spec.ndim))
    return y.squeeze(0) if unbatched else y


class _PolyphaseConvT(ConvTAttributes, nn.Module):
    def __init__(self, spec: ConvTSpec, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.spec = spec
        self.phases = math.prod(spec.stride)
        self.order = "phase" if spec.groups == 1 else "channel"    # phase-major interleaves with fewer transposes
        self.weight = nn.Parameter(polyphase_weight(weight, spec, self.order), requires_grad=weight.requires_grad)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=bias.requires_grad)
        phase_bias = None if bias is None else (bias.detach().repeat(self.phases) if self.order == "phase"
                                                else bias.detach().repeat_interleave(self.phases))
        self.register_buffer("phase_bias", phase_bias, persistent=False)

    from_conv_transpose = classmethod(lambda cls, m: _from_conv_transpose(cls, m))

    def forward(self, x: torch.Tensor, output_size=None) -> torch.Tensor:
        return polyphase_forward(x, self.weight, self.phase_bias, self.bias, self.spec, self.order, output_size)

    def extra_repr(self) -> str:
        return f"polyphase {self.spec.describe()}: {self.phases} phases, taps={_fmt(self.spec.taps)}"


class PolyphaseConvT1d(_PolyphaseConvT):
    """ConvTranspose1d as one stride-1 Conv1d over all `stride` output phases + interleave + crop.

    Exact to fp32 rounding for finite inputs; MACs = those of the transposed conv (kernel padded to a
    multiple of the stride). Works for any kernel, padding, output_padding, groups; dilation by
    densifying the kernel.
    """
    _ndim = 1


class PolyphaseConvT2d(_PolyphaseConvT):
    """ConvTranspose2d as one stride-1 Conv2d over all stride_h*stride_w phases + rank-4 depth-to-space + crop.

    Exact to fp32 rounding for finite inputs; MACs = those of the transposed conv (kernel padded to a
    multiple of the stride), i.e. stride_h*stride_w times fewer than zero-stuffing. Any kernel, padding,
    output_padding, groups, unequal strides; dilation by densifying the kernel.
    """
    _ndim = 2


class DepthwisePolyphaseConvT1d(PolyphaseConvT1d):
    """Depthwise (groups == channels) ConvTranspose1d: a depthwise Conv1d with multiplier `stride` + interleave."""

    @classmethod
    def from_conv_transpose(cls, m):
        if not ConvTSpec.of(m).is_depthwise:
            raise ValueError("DepthwisePolyphaseConvT1d needs groups == in_channels == out_channels")
        return super().from_conv_transpose(m)


class DepthwisePolyphaseConvT2d(PolyphaseConvT2d):
    """Depthwise (groups == channels) ConvTranspose2d: DEPTHWISE_CONV_2D with multiplier sh*sw + depth-to-space.

    For kernel == stride each phase is a per-channel multiply (1x1 depthwise); for kernel == 2*stride a
    per-channel 2x2 filter. Cheapest exact form: no zero multiplies, no per-group split.
    """

    @classmethod
    def from_conv_transpose(cls, m):
        if not ConvTSpec.of(m).is_depthwise:
            raise ValueError("DepthwisePolyphaseConvT2d needs groups == in_channels == out_channels")
        return super().from_conv_transpose(m)
