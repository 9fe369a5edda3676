"""Tensor.unfold framing and F.unfold / nn.Unfold (im2col) at rank <= 4 (rewrite `patch_unfold`).

Active inside `GpuRewriteWrapper` (default on). Plain conversion of these (litert-torch 0.10.0, llvmpipe,
ai-edge-litert 2.3.0) gives GATHER_ND / BROADCAST_TO, rank-5+ tensors or a conversion error (see
tests/toolkit/rewrites/test_unfold.py for what each spelling gave). Rewrites:

  * `x.unfold(dim, size, step)` with an output of rank <= 4 (x of rank <= 3), e.g. STFT framing
    `x.unfold(-1, frame, hop)`: the axis is moved last, then
      - step divides size (size = m * step): the signal is cut into step-long blocks (a reshape) and
        frame i is the concatenation of blocks i .. i + m - 1 (m slices + one CONCATENATION): pure data
        movement, bit-exact for any values;
      - otherwise: a conv1d with a one-hot kernel (output channel j picks tap j; `size` channels,
        stride `step`) and a transpose: exact for finite inputs (each output is one sample times 1.0
        plus zeros), but an inf / NaN sample turns its window neighbours into NaN (0 * inf).
  * `F.unfold(x, kernel_size, dilation, padding, stride)` on [N, C, H, W]: a depthwise conv2d with a
    one-hot kernel (multiplier kh * kw; output channel c * kh * kw + i * kw + j reads x[c] at tap (i, j)
    -- F.unfold's channel order) and a reshape to [N, C * kh * kw, L]. Exact for finite inputs (same
    caveat for inf / NaN).
NotImplemented (the original op runs): outputs above rank 4 -- chained image-patch unfolds
`x.unfold(2, k, s).unfold(3, k, s)` build a rank-6 tensor, which this cannot express (use F.unfold,
whose [N, C*k*k, L] layout holds the same patches) -- non-float tensors and arguments torch would refuse.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .functional import register_handler
from .registry import declare

NAME = "patch_unfold"
declare(NAME, wall="unfold")


def _pair(v):
    if isinstance(v, (tuple, list)):
        return tuple(int(a) for a in v) if len(v) == 2 else None
    return (int(v), int(v))


def _one_hot(rows: int, taps: tuple[int, ...], dtype) -> torch.Tensor:
    """[rows, 1, *taps] with row r = one-hot at flat tap r (a numpy constant: one tensor under export)."""
    k = int(np.prod(taps))
    w = np.zeros((rows, k), dtype=np.float32)
    w[np.arange(rows), np.arange(rows) % k] = 1.0
    return torch.tensor(w.reshape(rows, 1, *taps).tolist(), dtype=dtype)


def frames_last(x: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """x [..., T] -> [..., n_frames, size], frame i = x[..., i * step : i * step + size]."""
    lead = tuple(int(v) for v in x.shape[:-1])
    length = int(x.shape[-1])
    n = (length - size) // step + 1
    flat = x.reshape(-1, length)
    rows = flat.shape[0]
    if size % step == 0:
        m = size // step
        blocks = flat[:, :(n + m - 1) * step].reshape(rows, n + m - 1, step)
        out = blocks[:, :n] if m == 1 else torch.cat([blocks[:, u:u + n] for u in range(m)], -1)
    else:
        kernel = _one_hot(size, (size,), x.dtype)
        out = F.conv1d(flat.unsqueeze(1), kernel, stride=step).transpose(1, 2)     # [rows, n, size]
    return out.reshape(*lead, n, size)


@register_handler(torch.Tensor.unfold, NAME)
def _tensor_unfold_handler(self, dimension, size, step):
    if not isinstance(self, torch.Tensor) or not self.is_floating_point() or self.dim() < 1 or self.dim() > 3:
        return NotImplemented
    nd = self.dim()
    dim = int(dimension) % nd
    size, step = int(size), int(step)
    if size < 1 or step < 1 or size > self.shape[dim]:
        return NotImplemented
    if size == 1 and step == 1:
        return NotImplemented
    x = self if dim == nd - 1 else self.movedim(dim, -1)
    out = frames_last(x, size, step)                                                  # [..., n, size]
    return out if dim == nd - 1 else out.movedim(-2, dim)


def im2col(x: torch.Tensor, kernel_size, dilation=1, padding=0, stride=1):
    """F.unfold as a one-hot depthwise conv2d + reshape; NotImplemented where it does not apply."""
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4) or not x.is_floating_point():
        return NotImplemented
    k, d, p, s = (_pair(v) for v in (kernel_size, dilation, padding, stride))
    if None in (k, d, p, s) or min(k) < 1 or min(d) < 1 or min(s) < 1 or min(p) < 0:
        return NotImplemented
    unbatched = x.dim() == 3
    if unbatched:
        x = x.unsqueeze(0)
    c = int(x.shape[1])
    taps = k[0] * k[1]
    kernel = _one_hot(c * taps, k, x.dtype)                                           # [C*kh*kw, 1, kh, kw]
    y = F.conv2d(x, kernel, None, s, p, d, c)                                         # [N, C*kh*kw, Ho, Wo]
    if y.shape[-1] < 1 or y.shape[-2] < 1:
        return NotImplemented
    y = y.reshape(int(y.shape[0]), c * taps, -1)
    return y[0] if unbatched else y


@register_handler(F.unfold, NAME)
def _f_unfold_handler(input, kernel_size, dilation=1, padding=0, stride=1):
    return im2col(input, kernel_size, dilation, padding, stride)


def patch_unfold(model):
    """Wrap `model` so the unfold handlers apply (functional rewrites: `GpuRewriteWrapper(model,
    include=["patch_unfold"])`); named here so the symptom table can point at it."""
    from .functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[NAME])
