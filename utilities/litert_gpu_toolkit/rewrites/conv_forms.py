"""Convolution spellings the converter refuses or the GPU miscomputes, rewritten exactly (rewrite `patch_conv_forms`).

Functional handlers, active inside `GpuRewriteWrapper` (nn.Conv1d / Conv2d / Conv3d call the same
functions, so modules are covered too). Measured with litert-torch 0.10.0 on llvmpipe (software Vulkan),
ai-edge-litert 2.3.0; tests/toolkit/rewrites/test_conv_forms.py lists every form tried:

  * conv1d with string padding ('same' / 'valid'): the converter fails ("aten::convolution() Expected a
    value of type 'List[int]' for argument 'padding'", the aten.conv1d.padding overload). Rewritten to
    integer padding -- torch's 'same' rule: total d (k - 1), left total // 2, the odd sample on the right
    as an explicit zero PAD. Exact: the same conv on the same zero-padded input.
  * conv1d / conv2d with groups whose channels per group are not multiples of 4 (e.g. a weight computed
    in forward, which patch_grouped_conv's module patch cannot see): the GPU's grouped CONV_2D returns
    wrong values (corr 0.11). Rewritten as one conv per group (`transpose_conv.conv_per_group`), exact.
  * conv3d: every intermediate is rank 5 ('Tensor dimensions must be less than 5'). Rewritten as, per
    depth tap, one conv2d over all output depths batched into the batch axis, summed: rank <= 4 inside,
    exact up to fp32 summation order. The rank-5 input / output views remain; when the model builds the
    5-D tensor by a reshape of a 4-D one (and reshapes the result back), the converter merges the
    consecutive reshapes and no rank-5 tensor is left.
NotImplemented (the original op runs) elsewhere: non-float tensors, other padding strings, arguments torch
would refuse.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .functional import register_handler
from .registry import declare
from .shared import conv_per_group
from .shared import conv_axes
NAME = "patch_conv_forms"
declare(NAME, wall="conv_forms")


def _misaligned(weight: torch.Tensor, groups: int) -> bool:
    cig, cog = int(weight.shape[1]), int(weight.shape[0]) // groups
    return groups > 1 and cig > 1 and bool(cig % 4 or cog % 4)


def _string_padding(padding: str, kernel, dilation):
    """Per-axis (left, right) zero padding for 'same' / 'valid' (torch's rule), or None for another string."""
    if padding == "valid":
        return [(0, 0)] * len(kernel)
    if padding != "same":
        return None
    return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation)]


def conv_rewritten(nd: int, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv1d / conv2d without string padding and without misaligned grouped convs; NotImplemented if
    neither applies (or the arguments are ones this does not handle)."""
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)) or weight.dim() != nd + 2 or \
            x.dim() not in (nd + 1, nd + 2) or not x.is_floating_point() or x.is_complex():
        return NotImplemented
    groups = int(groups)
    stride, dilation = conv_axes(stride, nd), conv_axes(dilation, nd)
    if stride is None or dilation is None or groups < 1:
        return NotImplemented
    string = isinstance(padding, str)
    if not string and not _misaligned(weight, groups):
        return NotImplemented
    if string and nd == 2 and not _misaligned(weight, groups):
        return NotImplemented                            # conv2d with string padding converts
    unbatched = x.dim() == nd + 1
    if unbatched:
        x = x.unsqueeze(0)
    if string:
        pads = _string_padding(padding, tuple(int(k) for k in weight.shape[2:]), dilation)
        if pads is None or (padding == "same" and any(s != 1 for s in stride)):
            return NotImplemented                        # torch refuses 'same' with stride
        sym = [lo for lo, hi in pads]
        extra = [v for lo, hi in reversed(pads) for v in (0, hi - lo)]
        if any(extra):
            x = F.pad(x, extra)
        padding = tuple(sym)
    else:
        padding = conv_axes(padding, nd)
        if padding is None:
            return NotImplemented
    y = conv_per_group(x, weight, bias, groups, padding, dilation, stride)
    return y.squeeze(0) if unbatched else y


@register_handler(F.conv1d, NAME)
def _conv1d_handler(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv_rewritten(1, input, weight, bias, stride, padding, dilation, groups)


@register_handler(F.conv2d, NAME)
def _conv2d_handler(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv_rewritten(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d_as_conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv3d as a sum over depth taps of conv2d with the output depths in the batch axis (rank <= 4 inside)."""
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)) or weight.dim() != 5 or \
            x.dim() not in (4, 5) or not x.is_floating_point() or isinstance(padding, str):
        return NotImplemented
    stride, padding, dilation = conv_axes(stride, 3), conv_axes(padding, 3), conv_axes(dilation, 3)
    if None in (stride, padding, dilation) or int(groups) < 1:
        return NotImplemented
    unbatched = x.dim() == 4
    if unbatched:
        x = x.unsqueeze(0)
    n, c, d, h, w = (int(v) for v in x.shape)
    o, kd = int(weight.shape[0]), int(weight.shape[2])
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = stride, padding, dilation
    d_out = (d + 2 * pd - dd * (kd - 1) - 1) // sd + 1
    if d_out < 1:
        return NotImplemented
    t = x.reshape(n, c, d, h * w).transpose(1, 2)                      # [N, D, C, HW]
    t = t.reshape(n, d, c * h * w)
    dp = d + 2 * pd
    rows = -(-max(dp, (d_out - 1) * sd + dd * (kd - 1) + 1) // sd) * sd
    t = F.pad(t, (0, 0, pd, rows - d - pd))                              # zero depth padding, multiple of sd
    t = t.reshape(n, rows // sd, sd, c * h * w)
    out = None
    for j in range(kd):
        start = dd * j
        q, r = divmod(start, sd)
        taps = t[:, q:q + d_out, r]                                       # depths sd * i + start: [N, Dout, CHW]
        y = conv_per_group(taps.reshape(n * d_out, c, h, w), weight[:, :, j], bias if j == 0 else None, int(groups),
                         (ph, pw), (dh, dw), (sh, sw))
        out = y if out is None else out + y
    ho, wo = int(out.shape[-2]), int(out.shape[-1])
    out = out.reshape(n, d_out, o, ho * wo).transpose(1, 2)             # [N, O, Dout, HoWo]
    out = out.reshape(n, o, d_out, ho, wo)
    return out.squeeze(0) if unbatched else out


@register_handler(F.conv3d, NAME)
def _conv3d_handler(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv3d_as_conv2d(input, weight, bias, stride, padding, dilation, groups)


def patch_conv_forms(model):
    """Wrap `model` so the conv-form handlers apply (they are functional: `GpuRewriteWrapper(model,
    include=["patch_conv_forms"])`); named here so the symptom table can point at it."""
    from .functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[NAME])
