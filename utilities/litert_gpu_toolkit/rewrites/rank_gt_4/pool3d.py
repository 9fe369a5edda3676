"""3-D pooling at rank 4 (rewrite `patch_pool3d`, functional, default).

The wall: F.max_pool3d / F.avg_pool3d (nn.MaxPool3d / AvgPool3d, e.g. in S3D and I3D) convert to a rank-5
STABLEHLO_REDUCE_WINDOW / AVERAGE_POOL that the GPU rejects, and `fold_rank5` cannot carry a window that spans
the last two axes. Rewritten as `patch_conv_forms` does conv3d: the output depths go into the batch axis, one 2-D
pool per depth tap, the taps combined -- max by MAXIMUM, average by their mean. Inside, every tensor is rank <= 4;
the rank-5 views at either end fold away (consecutive reshapes) or are carried by `fold_rank5`. The 2-D pools run
with the rewrite mode entered again (`functional.in_active_mode`): padded ones need `patch_avg_pool` /
`patch_maxpool_zeropad` as much as the model's own.

Exactness: max is exact (depth padding repeats the edge frame, which is inside every window that reaches past
it, so the maximum is unchanged); average is exact up to fp32 summation order (the sum over the window runs as kd
partial means; zero depth padding counts like torch's count_include_pad=True). NotImplemented (the original op
runs) for: dilation, ceil_mode, return_indices, divisor_override, count_include_pad=False with padding, string
or malformed arguments, non-float tensors.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..functional import in_active_mode
from ..registry import declare, register_handler

NAME = "patch_pool3d"
declare(NAME, wall="rank_gt_4")


def _three(v, default=None):
    if v is None:
        return default
    v = tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * 3
    return v if len(v) == 3 else ((v * 3) if len(v) == 1 else None)


def pool3d_as_pool2d(kind: str, x, kernel_size, stride=None, padding=0, count_include_pad=True):
    """F.max_pool3d ("max") / F.avg_pool3d ("avg") of `x` ([N, C, D, H, W] or [C, D, H, W]) with rank <= 4 inside
    (module docstring); NotImplemented where the form does not apply."""
    k = _three(kernel_size)
    s, p = (k if stride in (None, (), []) else _three(stride)), _three(padding)
    if None in (k, s, p) or not isinstance(x, torch.Tensor) or x.dim() not in (4, 5) or not x.is_floating_point():
        return NotImplemented
    if any(2 * pi > ki for pi, ki in zip(p, k)):
        return NotImplemented                           # torch refuses it: let it say so
    if kind == "avg" and not count_include_pad and any(p):
        return NotImplemented
    unbatched = x.dim() == 4
    if unbatched:
        x = x.unsqueeze(0)
    n, c, d, h, w = (int(v) for v in x.shape)
    (kd, kh, kw), (sd, sh, sw), (pd, ph, pw) = k, s, p
    d_out = (d + 2 * pd - kd) // sd + 1
    if d_out < 1:
        return NotImplemented
    t = x.reshape(n, c, d, h * w).transpose(1, 2).reshape(n, d, c * h * w)      # [N, D, CHW]
    if pd:
        if kind == "max":                               # the edge frame again: inside every window reaching past it
            t = torch.cat([t[:, :1]] * pd + [t] + [t[:, -1:]] * pd, 1)
        else:
            t = F.pad(t, (0, 0, pd, pd))
    out = None
    for j in range(kd):
        taps = t[:, j:j + sd * (d_out - 1) + 1:sd].reshape(n * d_out, c, h, w)     # depths sd * i + j
        if kind == "max":
            y = F.max_pool2d(taps, (kh, kw), (sh, sw), (ph, pw))
            out = y if out is None else torch.maximum(out, y)
        else:
            y = F.avg_pool2d(taps, (kh, kw), (sh, sw), (ph, pw), count_include_pad=count_include_pad)
            out = y if out is None else out + y
    if kind == "avg" and kd > 1:
        out = out / kd
    ho, wo = int(out.shape[-2]), int(out.shape[-1])
    out = out.reshape(n, d_out, c, ho * wo).transpose(1, 2).reshape(n, c, d_out, ho, wo)
    return out.squeeze(0) if unbatched else out


def patch_pool3d(model):
    """Wrap `model` so its 3-D pools run as `pool3d_as_pool2d` (functional: on by default inside `GpuRewriteWrapper`
    and `convert_for_gpu`; nn.MaxPool3d / AvgPool3d call the functions); named here for the symptom table."""
    from ..functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[NAME])


@register_handler(F.max_pool3d, NAME)
def _max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if _three(dilation) != (1, 1, 1) or ceil_mode or return_indices:
        return NotImplemented
    return in_active_mode(pool3d_as_pool2d, "max", input, kernel_size, stride, padding)


@register_handler(F.avg_pool3d, NAME)
def _avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if ceil_mode or divisor_override is not None:
        return NotImplemented
    return in_active_mode(pool3d_as_pool2d, "avg", input, kernel_size, stride, padding, count_include_pad)
