"""Transposed convolution without TRANSPOSE_CONV: zero-stuffed and polyphase forms.

Wall: `transpose_conv` in `symptoms.py`. Some phone GPU delegates reject the converter's
TRANSPOSE_CONV (op-version skew); the desktop WebGPU delegate accepts it, so on this toolchain the
proof is that the original graph *contains* TRANSPOSE_CONV and the rewritten one does not. A grouped
(depthwise) ConvTranspose is worse still: the converter splits it into one SLICE + TRANSPOSE_CONV per
group and a CONCATENATION.

Two exact replacements, both plain stride-1 convolutions plus rank-4 reshapes / transposes:

* `ZeroStuffConvT1d` / `ZeroStuffConvT2d`: insert `stride - 1` zeros between input samples
  (a reshape + PAD), pad / crop the borders, convolve with the flipped, transposed kernel. Handles
  every ConvTranspose option (groups, padding, output_padding, dilation, unequal strides). It
  multiplies by the stuffed zeros: stride (1-D) or stride_h * stride_w (2-D) times the MACs of the
  transposed conv, and it materialises the full-resolution stuffed input.
* `PolyphaseConvT1d` / `PolyphaseConvT2d`: one stride-1 conv at the *input* resolution computes every
  output phase (stride (1-D) or stride_h * stride_w (2-D) phases, `out_channels * phases` conv
  outputs, channel-major order c * phases + phase), then a rank-4 interleave (depth-to-space) and a
  crop. The kernel is zero-padded up to a multiple of the stride, so it applies to any kernel size;
  groups (including depthwise) map to a grouped conv; dilation is handled by densifying the kernel
  (zeros between taps), which costs MACs, so `patch_conv_transpose(mode="auto")` picks the form with
  fewer MACs. Its MACs equal the transposed conv's own, up to the kernel padding.
* Depthwise upsamplers (groups == in_channels == out_channels) become a DEPTHWISE_CONV_2D with depth
  multiplier stride**2 -- each output phase is a per-channel m x m filter of the input (m =
  ceil(kernel / stride); for kernel == stride it is a per-channel multiply) -- plus the interleave.
  `DepthwisePolyphaseConvT2d` / `DepthwisePolyphaseConvT1d` are that form (a `PolyphaseConvT*d`
  whose conv is depthwise); `patch_conv_transpose` uses it automatically.

Exactness: all forms compute the same sums of products as ConvTranspose, in a different order, so
they agree to fp32 rounding (measured max relative error ~1e-6 of the output scale, bound
`<= k_taps * in_channels * 2**-23` relative to sum(|x| |w|)), for any finite input. Inputs holding
inf/NaN: the zero-stuffed form multiplies stuffed zeros by kernel taps only (never the input), so a
non-finite input spreads exactly as far as in ConvTranspose; the polyphase form's zero-padded kernel
taps multiply real inputs, so an inf input can turn into NaN at neighbouring outputs (0 * inf).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import Change, register, set_submodule
from .rank import depth_to_space

__all__ = [
    "ConvTSpec", "ZeroStuffConvT1d", "ZeroStuffConvT2d", "PolyphaseConvT1d", "PolyphaseConvT2d",
    "DepthwisePolyphaseConvT1d", "DepthwisePolyphaseConvT2d", "patch_conv_transpose", "conv_transpose_macs",
    "interleave_phases", "zero_stuff", "grouped_conv", "polyphase_weight", "choose_form",
]


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
      `rewrites.rank.depth_to_space` (same order, same ops).
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


def _conv(ndim: int):
    return F.conv1d if ndim == 1 else F.conv2d


def grouped_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int,
                 padding: int = 0, dilation=1, stride=1) -> torch.Tensor:
    """Stride-1 conv with `groups`, split into one conv per group unless the GPU runs the grouped form right.

    Measured on llvmpipe (ai-edge-litert 2.3.0): a grouped CONV_2D returns wrong values (or crashes)
    unless both channels-per-group counts are multiples of 4; depthwise (1 input channel per group,
    any multiplier) is fine. The split (SLICE + CONV_2D per group + CONCATENATION) is exact.
    """
    conv = _conv(x.dim() - 2)
    cig, cog = weight.shape[1], weight.shape[0] // groups
    if groups == 1 or cig == 1 or (cig % 4 == 0 and cog % 4 == 0):
        return conv(x, weight, bias, stride, padding, dilation, groups)
    outs = [conv(x[:, i * cig:(i + 1) * cig], weight[i * cog:(i + 1) * cog],
                 None if bias is None else bias[i * cog:(i + 1) * cog], stride, padding, dilation)
            for i in range(groups)]
    return torch.cat(outs, 1)


# ------------------------------------------------------------------------------------- zero-stuff

def _from_conv_transpose(cls, m):
    """Build a rewrite class (`cls(spec, weight, bias)`) from an nn.ConvTranspose of its dimension."""
    spec = ConvTSpec.of(m)
    if spec.ndim != cls._ndim:
        raise TypeError(f"{cls.__name__} needs a ConvTranspose{cls._ndim}d, got {type(m).__name__}")
    return cls(spec, m.weight, m.bias)


class _ZeroStuffConvT(nn.Module):
    def __init__(self, spec: ConvTSpec, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.spec = spec
        g, nd = spec.groups, spec.ndim
        cig, cog = spec.in_channels // g, spec.out_channels // g
        # ConvTranspose weight [C_in, C_out/g, *k] -> conv weight [C_out, C_in/g, *k], taps reversed.
        w = weight.detach().reshape(g, cig, cog, *spec.kernel).transpose(1, 2)
        w = w.reshape(spec.out_channels, cig, *spec.kernel).flip(dims=tuple(range(2, 2 + nd)))
        self.weight = nn.Parameter(w.contiguous(), requires_grad=weight.requires_grad)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=bias.requires_grad)

    from_conv_transpose = classmethod(lambda cls, m: _from_conv_transpose(cls, m))

    def forward(self, x: torch.Tensor, output_size=None) -> torch.Tensor:
        spec = self.spec
        x, unbatched = _batched(x, spec.ndim)
        op = _output_padding(spec, x, output_size)
        y = zero_stuff(x, spec.stride)
        pads = [(d * (k - 1) - p, d * (k - 1) - p + o)
                for d, k, p, o in zip(spec.dilation, spec.kernel, spec.padding, op)]
        # pad before the conv; a negative pad (padding > dilated kernel - 1) crops the conv output instead,
        # which is the same for a stride-1 conv and keeps the conv input at least one kernel wide
        y = _pad_or_crop(y, [(max(lo, 0), max(hi, 0)) for lo, hi in pads])
        y = grouped_conv(y, self.weight, self.bias, spec.groups, 0, spec.dilation)
        y = _pad_or_crop(y, [(min(lo, 0), min(hi, 0)) for lo, hi in pads])
        return y.squeeze(0) if unbatched else y

    def extra_repr(self) -> str:
        return f"zero-stuffed {self.spec.describe()}"


class ZeroStuffConvT1d(_ZeroStuffConvT):
    """ConvTranspose1d as zero-stuffing + stride-1 Conv1d (exact to fp32 rounding, every option supported).

    MACs: stride x those of the transposed conv. Use `PolyphaseConvT1d` when speed matters.
    """
    _ndim = 1


class ZeroStuffConvT2d(_ZeroStuffConvT):
    """ConvTranspose2d as zero-stuffing + stride-1 Conv2d (exact to fp32 rounding, every option supported).

    MACs: stride_h * stride_w x those of the transposed conv. Use `PolyphaseConvT2d` when speed matters.
    """
    _ndim = 2


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


class _PolyphaseConvT(nn.Module):
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
        spec = self.spec
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
        z = grouped_conv(x, self.weight, None if late_bias else self.phase_bias, spec.groups, conv_pad)
        y = interleave_phases(z, spec.stride, self.order)
        crops = [(-(p - lo * s), 0) for p, lo, s in zip(spec.padding, lo_rows, spec.stride)]
        y = _pad_or_crop(y, crops)
        y = _pad_or_crop(y, [(0, o - n) for o, n in zip(out_size, y.shape[2:])])
        if late_bias and self.bias is not None:
            y = y + self.bias.reshape(-1, *([1] * spec.ndim))
        return y.squeeze(0) if unbatched else y

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


# ------------------------------------------------------------------------------------------ patch

_FORMS = {
    ("zerostuff", 1): ZeroStuffConvT1d, ("zerostuff", 2): ZeroStuffConvT2d,
    ("polyphase", 1): PolyphaseConvT1d, ("polyphase", 2): PolyphaseConvT2d,
    ("depthwise", 1): DepthwisePolyphaseConvT1d, ("depthwise", 2): DepthwisePolyphaseConvT2d,
}


def choose_form(spec: ConvTSpec, mode: str = "auto") -> str:
    """polyphase / depthwise / zerostuff for `spec` under `mode` (auto = polyphase unless zero-stuff needs fewer MACs)."""
    if mode not in ("auto", "polyphase", "zerostuff"):
        raise ValueError(f"mode must be auto, polyphase or zerostuff, got {mode!r}")
    if mode == "zerostuff":
        return "zerostuff"
    poly = "depthwise" if spec.is_depthwise else "polyphase"
    if mode == "polyphase":
        return poly
    # per output sample: polyphase reads prod(taps) inputs, zero-stuff prod(kernel) (stuffed) inputs
    return poly if math.prod(spec.taps) <= math.prod(spec.kernel) else "zerostuff"


@register("patch_conv_transpose", wall="transpose_conv")
def patch_conv_transpose(model: nn.Module, mode: str = "auto") -> list[Change]:
    """Replace every nn.ConvTranspose1d / 2d in `model` (in place) with a TRANSPOSE_CONV-free exact form.

    mode="auto": polyphase (depthwise polyphase for groups == channels) unless dilation makes the
    zero-stuffed form cheaper; "polyphase" / "zerostuff" force one form. Exact to fp32 rounding.
    """
    if mode not in ("auto", "polyphase", "zerostuff"):
        raise ValueError(f"mode must be auto, polyphase or zerostuff, got {mode!r}")
    changes: list[Change] = []
    for path, m in list(model.named_modules()):
        if type(m) not in (nn.ConvTranspose1d, nn.ConvTranspose2d):
            continue
        spec = ConvTSpec.of(m)
        form = choose_form(spec, mode)
        new = _FORMS[(form, spec.ndim)].from_conv_transpose(m)
        new.train(m.training)
        if path:
            set_submodule(model, path, new)
        else:
            raise ValueError("the root module is itself a ConvTranspose; wrap it or call the class directly")
        changes.append(Change(path, f"{spec.describe()} -> {type(new).__name__}", "patch_conv_transpose", True))
    return changes


# ------------------------------------------------------------------------------------- grouped conv

class SplitGroupConv(nn.Module):
    """nn.Conv1d/Conv2d with groups, computed as one conv per group (SLICE + CONV + CONCATENATION).

    Removes the grouped CONV_2D that the desktop GPU computes wrongly (symptom `grouped_conv`) when the
    channels per group are not multiples of 4. Exact (the same dot products); any stride, padding
    (zeros), dilation. Depthwise and 4-aligned groups are left as one conv by `grouped_conv`'s rule.
    """

    def __init__(self, conv: nn.Conv1d | nn.Conv2d):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.groups, self.stride, self.padding, self.dilation = conv.groups, conv.stride, conv.padding, conv.dilation

    def forward(self, x):
        return grouped_conv(x, self.weight, self.bias, self.groups, self.padding, self.dilation, self.stride)


def _misaligned_groups(conv) -> bool:
    cig, cog = conv.in_channels // conv.groups, conv.out_channels // conv.groups
    return conv.groups > 1 and cig > 1 and (cig % 4 or cog % 4) and conv.padding_mode == "zeros"


@register("patch_grouped_conv", wall="grouped_conv")
def patch_grouped_conv(model: nn.Module) -> list[Change]:
    """Grouped Conv1d/Conv2d whose channels per group are not multiples of 4 -> `SplitGroupConv` (exact)."""
    changes = []
    for path, m in list(model.named_modules()):
        if path and isinstance(m, (nn.Conv1d, nn.Conv2d)) and _misaligned_groups(m):
            set_submodule(model, path, SplitGroupConv(m))
            changes.append(Change(path, f"{type(m).__name__}(groups={m.groups}) -> one conv per group",
                                  "patch_grouped_conv", True))
    return changes


__all__ += ["SplitGroupConv", "patch_grouped_conv"]
