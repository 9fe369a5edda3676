"""F.conv_transpose1d / F.conv_transpose2d (= torch.conv_transpose1d / 2d) as the polyphase form, for any weight.

The module patch only sees nn.ConvTranspose*; models also call the functional op with a weight they build
in forward (a 1-D UNet's upsampler fills a [C, C, k] kernel per call and runs
`F.conv_transpose1d(x, w, stride=2, padding=1)`), which litert-torch 0.10.0 cannot convert ("failed to
legalize operation 'mhlo.convolution'") unless the padding is 0 or (k - s) / 2, and which becomes
TRANSPOSE_CONV otherwise.

The handler rewrites the weight into the polyphase layout with rank <= 4 torch ops only -- one matmul per
spatial axis with a constant 0/1 selection matrix (which writes out dilation, pads the kernel to a multiple
of the stride and reverses the taps: no REVERSE_V2, no rank-5+ reshape), a few transposes and reshapes --
and then runs the same polyphase conv + interleave + crop as `PolyphaseConvT*d`. A weight built from
constants folds away at conversion; a weight computed from the input stays in the graph as those ops.

Exact: every polyphase weight entry is one weight entry times 1.0 plus zeros (bit-exact), and the conv sums
the same products as the transposed conv in another order (fp32 rounding, bound as `PolyphaseConvT*d`).
Channel-major phase order, so groups and depthwise upsamplers take the same path.
Not rewritten (NotImplemented -> the original op): non-float tensors, arguments torch itself would refuse.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..functional import register_handler
from .polyphase import polyphase_forward
from .spec import ConvTSpec
from ..shared import conv_axes


def selection_matrix(k: int, s: int, d: int, dtype=torch.float32) -> torch.Tensor:
    """[k, s * m] 0/1 matrix: (w @ P)[..., r * m + v] = tap v of phase r of the dilated kernel padded to m * s
    (m = ceil((d (k - 1) + 1) / s)), i.e. dense tap (m - 1 - v) * s + r; original tap t sits at dense d * t.
    Built in numpy so that under torch.export it is one constant, not traced index assignments."""
    m = -(-(d * (k - 1) + 1) // s)
    p = np.zeros((k, s * m), dtype=np.float32)
    for t in range(k):
        q, r = divmod(d * t, s)
        p[t, r * m + (m - 1 - q)] = 1.0
    return torch.tensor(p.tolist(), dtype=dtype)


def _select(w: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """w @ p over the last axis as one 2-D matmul with a constant right operand (a broadcast batch matmul
    would add a BROADCAST_TO); exact: each output is one entry of w times 1.0 plus zeros."""
    return torch.matmul(w.reshape(-1, w.shape[-1]), p).reshape(*w.shape[:-1], p.shape[1])


def polyphase_weight_rank4(weight: torch.Tensor, spec: ConvTSpec) -> torch.Tensor:
    """ConvTranspose weight [C_in, C_out/g, *k] -> channel-major polyphase weight [C_out * phases, C_in/g, *taps],
    equal to `polyphase_weight(weight, spec, "channel")`, with rank <= 4 ops that also trace for a runtime weight."""
    g, nd = spec.groups, spec.ndim
    cin, cog = spec.in_channels, spec.out_channels // g
    cig = cin // g
    taps = spec.taps
    mats = [selection_matrix(k, s, d, weight.dtype) for k, s, d in zip(spec.kernel, spec.stride, spec.dilation)]
    if nd == 1:
        (m,), (s,) = taps, spec.stride
        a = _select(weight, mats[0])                                       # [Cin, cog, s*m]
        a = a.reshape(g, cig, cog * s, m).permute(0, 2, 1, 3)            # [g, cog*s, cig, m]
        return a.reshape(g * cog * s, cig, m)
    (mh, mw), (sh, sw) = taps, spec.stride
    a = _select(weight, mats[1])                                           # [Cin, cog, kh, sw*mw]
    a = _select(a.transpose(2, 3), mats[0])                                # [Cin, cog, sw*mw, sh*mh]
    a = a.reshape(cin * cog * sw, mw, sh, mh).permute(0, 2, 3, 1)         # [Cin*cog*sw, sh, mh, mw]
    a = a.reshape(cin * cog, sw, sh, mh * mw).permute(0, 2, 1, 3)         # [Cin*cog, sh, sw, mh*mw]
    a = a.reshape(g, cig, cog * sh * sw, mh * mw).permute(0, 2, 1, 3)     # [g, cog*S, cig, mh*mw]
    return a.reshape(g * cog * sh * sw, cig, mh, mw)


def conv_transpose_polyphase(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """F.conv_transpose1d / 2d(x, weight, ...) without TRANSPOSE_CONV (see the module docstring).
    Returns NotImplemented where it does not apply (the caller then runs the original op)."""
    nd = weight.dim() - 2
    if nd not in (1, 2) or x.dim() not in (nd + 1, nd + 2) or not weight.is_floating_point() or \
            not x.is_floating_point() or x.is_complex():
        return NotImplemented
    groups = int(groups)
    args = [conv_axes(v, nd) for v in (stride, padding, output_padding, dilation)]
    if any(a is None for a in args) or groups < 1 or weight.shape[0] % groups:
        return NotImplemented
    stride, padding, output_padding, dilation = args
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0 or \
            any(o < 0 or o >= max(s, d) for o, s, d in zip(output_padding, stride, dilation)):
        return NotImplemented                                           # torch raises its own error
    cin = int(weight.shape[0])
    if x.shape[-nd - 1] != cin:
        return NotImplemented
    spec = ConvTSpec(nd, cin, int(weight.shape[1]) * groups, tuple(int(k) for k in weight.shape[2:]), stride,
                     padding, output_padding, dilation, groups)
    if min(spec.out_size(tuple(int(n) for n in x.shape[-nd:]))) < 1:
        return NotImplemented
    w = polyphase_weight_rank4(weight, spec)
    phases = math.prod(stride)
    phase_bias = None if bias is None else (bias.reshape(-1, 1) + bias.new_zeros(1, phases)).reshape(-1)
    return polyphase_forward(x, w, phase_bias, bias, spec, "channel")


@register_handler(F.conv_transpose1d, "patch_conv_transpose")
def _conv_transpose1d_handler(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    if weight.dim() != 3:
        return NotImplemented
    return conv_transpose_polyphase(input, weight, bias, stride, padding, output_padding, groups, dilation)


@register_handler(F.conv_transpose2d, "patch_conv_transpose")
def _conv_transpose2d_handler(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    if weight.dim() != 4:
        return NotImplemented
    return conv_transpose_polyphase(input, weight, bias, stride, padding, output_padding, groups, dilation)
