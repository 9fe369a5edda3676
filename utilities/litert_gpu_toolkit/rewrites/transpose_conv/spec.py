"""A transposed conv's geometry and the rank-4 helpers the exact rewrites share.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..rank_gt_4.pixel_shuffle import depth_to_space
from ..shared import conv_per_group, _conv  # noqa: F401 - re-exported


# --------------------------------------------------------------------------------------------- spec

@dataclass(frozen=True)
class ConvTSpec:
    """The hyper-parameters of a 1-D or 2-D ConvTranspose, as per-axis tuples."""
    ndim: int
    in_channels: int
    out_channels: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    output_padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int

    @classmethod
    def of(cls, m) -> "ConvTSpec":
        if not isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
            raise TypeError(f"expected nn.ConvTranspose1d/2d, got {type(m).__name__}")
        if m.padding_mode != "zeros":
            raise ValueError(f"padding_mode={m.padding_mode!r} is not supported by ConvTranspose")
        nd = 1 if isinstance(m, nn.ConvTranspose1d) else 2
        if isinstance(m.padding, str):
            raise ValueError("string padding is not supported for transposed convolutions")
        return cls(nd, m.in_channels, m.out_channels, tuple(m.kernel_size), tuple(m.stride), tuple(m.padding),
                   tuple(m.output_padding), tuple(m.dilation), m.groups)

    def out_size(self, size: tuple[int, ...], output_padding: tuple[int, ...] | None = None) -> tuple[int, ...]:
        op = self.output_padding if output_padding is None else output_padding
        return tuple((n - 1) * s - 2 * p + d * (k - 1) + o + 1
                     for n, s, p, d, k, o in zip(size, self.stride, self.padding, self.dilation, self.kernel, op))

    @property
    def dense_kernel(self) -> tuple[int, ...]:
        """Kernel extent once dilation is written out as zero taps."""
        return tuple(d * (k - 1) + 1 for d, k in zip(self.dilation, self.kernel))

    @property
    def taps(self) -> tuple[int, ...]:
        """Polyphase taps per axis: ceil(dense kernel / stride)."""
        return tuple(-(-k // s) for k, s in zip(self.dense_kernel, self.stride))

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.in_channels == self.out_channels

    def describe(self) -> str:
        return (f"ConvTranspose{self.ndim}d({self.in_channels}->{self.out_channels}, k={_fmt(self.kernel)}, "
                f"s={_fmt(self.stride)}, p={_fmt(self.padding)}"
                + (f", op={_fmt(self.output_padding)}" if any(self.output_padding) else "")
                + (f", d={_fmt(self.dilation)}" if any(d != 1 for d in self.dilation) else "")
                + (f", groups={self.groups}" if self.groups != 1 else "") + ")")


def _fmt(t: tuple[int, ...]) -> str:
    return str(t[0]) if len(set(t)) == 1 else "x".join(map(str, t))


def conv_transpose_macs(spec: ConvTSpec, in_size: tuple[int, ...], form: str = "native") -> int:
    """Multiply-adds per batch item of `form` in native / zerostuff / polyphase for an input of spatial `in_size`."""
    per_out = spec.in_channels // spec.groups                      # inputs feeding one output channel
    if form == "native":                                           # every input sample meets every tap once
        return spec.out_channels * per_out * math.prod(in_size) * math.prod(spec.kernel)
    if form == "zerostuff":                                        # stride-1 conv over the full output
        return spec.out_channels * per_out * math.prod(spec.out_size(in_size)) * math.prod(spec.kernel)
    if form == "polyphase":                                        # all phases at input resolution
        phases = math.prod(spec.stride)
        rows = math.prod(n + m - 1 for n, m in zip(in_size, spec.taps))
        return spec.out_channels * phases * per_out * rows * math.prod(spec.taps)
    raise ValueError(f"unknown form {form!r}")


# --------------------------------------------------------------------------------- rank-4 helpers

def _pad_or_crop(x: torch.Tensor, pads: list[tuple[int, int]]) -> torch.Tensor:
    """Per trailing spatial axis (lo, hi): positive = zero padding, negative = crop. Rank is kept."""
    nd = len(pads)
    for i, (lo, hi) in enumerate(pads):
        dim = x.dim() - nd + i
        if lo < 0 or hi < 0:
            start, stop = max(-lo, 0), x.shape[dim] - max(-hi, 0)
            x = x.narrow(dim, start, stop - start)
    pos = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    if any(lo or hi for lo, hi in pos):
        flat = [v for lo, hi in reversed(pos) for v in (lo, hi)]
        x = F.pad(x, flat)
    return x


def interleave_phases(z: torch.Tensor, stride: tuple[int, ...], order: str = "channel") -> torch.Tensor:
    """Rank-4 depth-to-space: the phases held in the channel axis move into the spatial axes.

    order="channel" (PixelShuffle's order, generalised to unequal strides): channel c*S + phase;
      1-D: z [N, C*s, L] -> [N, C, L*s], out[n, c, l*s + r] = z[n, c*s + r, l];
      2-D: z [N, C*sh*sw, H, W] -> [N, C, H*sh, W*sw], out[n, c, h*sh + i, w*sw + j] = z[n, (c*sh + i)*sw + j, h, w].
      Two TRANSPOSEs in 2-D (one in 1-D) in channels-first terms; equal 2-D strides use
      `rewrites.rank_gt_4.depth_to_space` (same order, same ops).
    order="phase" (TFLite DEPTH_TO_SPACE's order): channel phase*C + c, phase = i*sw + j. Written
      channels-last, so after a conv (which the converter runs channels-last) the layout TRANSPOSEs
      cancel: one TRANSPOSE in 2-D, none in 1-D, plus the one back to channels-first. About half the
      time of the channel-major form on llvmpipe.
    Every intermediate has rank <= 4; no GATHER, no rank-6 reshape. Bit-exact (data movement only).
    """
    if order not in ("channel", "phase"):
        raise ValueError("order must be 'channel' or 'phase'")
    if z.dim() == 3:
        (s,) = stride
        n, cs, length = z.shape
        c = cs // s
        if order == "phase":
            return z.permute(0, 2, 1).reshape(n, length * s, c).permute(0, 2, 1)
        return z.reshape(n * c, s, length).permute(0, 2, 1).reshape(n, c, length * s)
    sh, sw = stride
    n, css, h, w = z.shape
    c = css // (sh * sw)
    if order == "phase":
        t = z.permute(0, 2, 3, 1).reshape(n * h, w, sh, sw * c)      # [N*H, W, sh, (sw, C)]
        t = t.permute(0, 2, 1, 3).reshape(n, h * sh, w * sw, c)      # [N, H*sh, W*sw, C]
        return t.permute(0, 3, 1, 2)
    if sh == sw:                                                     # the toolkit's PixelShuffle form
        return depth_to_space(z, sh)
    z = z.reshape(n * c * sh, sw, h, w).permute(0, 2, 3, 1)          # [N*C*sh, H, W, sw]
    z = z.reshape(n * c, sh, h, w * sw).permute(0, 2, 1, 3)          # [N*C, H, sh, W*sw]
    return z.reshape(n, c, h * sh, w * sw)


def zero_stuff(x: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """Insert stride-1 zeros between samples along each trailing spatial axis (rank <= 4, PAD + RESHAPE).

    [N, C, L] -> [N, C, (L-1)*s + 1]; [N, C, H, W] -> [N, C, (H-1)*sh + 1, (W-1)*sw + 1]. Exact for any input.
    """
    if x.dim() == 3:
        (s,) = stride
        if s == 1:
            return x
        n, c, length = x.shape
        y = F.pad(x.reshape(n, c, length, 1), (0, s - 1)).reshape(n, c, length * s)
        return y[:, :, : (length - 1) * s + 1]
    sh, sw = stride
    n, c, h, w = x.shape
    if sw > 1:
        x = F.pad(x.reshape(n, c * h, w, 1), (0, sw - 1)).reshape(n, c, h, w * sw)[..., : (w - 1) * sw + 1]
        w = (w - 1) * sw + 1
    if sh > 1:
        x = F.pad(x.reshape(n * c, h, 1, w), (0, 0, 0, sh - 1)).reshape(n, c, h * sh, w)[:, :, : (h - 1) * sh + 1]
    return x


def _batched(x: torch.Tensor, ndim: int):
    unbatched = x.dim() == ndim + 1
    return (x.unsqueeze(0) if unbatched else x), unbatched


def _output_padding(spec: ConvTSpec, x: torch.Tensor, output_size) -> tuple[int, ...]:
    if output_size is None:
        return spec.output_padding
    want = tuple(output_size)[-spec.ndim:]
    base = spec.out_size(tuple(x.shape[-spec.ndim:]), (0,) * spec.ndim)
    op = tuple(w - b for w, b in zip(want, base))
    if any(o < 0 or o >= max(s, d) for o, s, d in zip(op, spec.stride, spec.dilation)):
        raise ValueError(f"output_size {want} is not reachable from input {tuple(x.shape)} with {spec.describe()}")
    return op


class ConvTAttributes:
    """The attributes of the nn.ConvTranspose a rewrite replaced, read from its `spec`: code around the layer reads
    them (EnCodec's decoder takes `self.conv.kernel_size[0]` and `self.conv.stride[0]` to trim its output)."""
    spec: ConvTSpec
    padding_mode = "zeros"

    @property
    def kernel_size(self) -> tuple[int, ...]:
        return self.spec.kernel

    @property
    def stride(self) -> tuple[int, ...]:
        return self.spec.stride

    @property
    def padding(self) -> tuple[int, ...]:
        return self.spec.padding

    @property
    def output_padding(self) -> tuple[int, ...]:
        return self.spec.output_padding

    @property
    def dilation(self) -> tuple[int, ...]:
        return self.spec.dilation

    @property
    def groups(self) -> int:
        return self.spec.groups

    @property
    def in_channels(self) -> int:
        return self.spec.in_channels

    @property
    def out_channels(self) -> int:
        return self.spec.out_channels
