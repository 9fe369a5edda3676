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
  * `F.fold(cols, output_size, kernel_size, dilation, padding, stride)` / nn.Fold (col2im, the inverse: VOLO's
    outlook attention) converts to a STABLEHLO_SCATTER that LiteRT's CPU refuses to prepare and the GPU does not
    take. Here each of the kh * kw taps is a [N, C, nH, nW] slice of the columns, spread to the stride with zero
    rows / columns (CONCATENATION + RESHAPE, rank 4), moved to its offset with a zero pad, and the kh * kw planes
    are added in tap order -- the order torch's col2im accumulates in -- then the padding is cropped. Exact for
    finite inputs to fp32 rounding of the sum of the <= kh * kw overlapping terms (measured bit-exact on the
    tests' shapes); an inf / NaN column stays where torch puts it plus 0 + inf sums elsewhere, as in torch.
  * image patches `x.unfold(2, kh, sh).unfold(3, kw, sw)` on [B, C, H, W] (rank 6: the plain conversion
    fails): the first unfold returns a lazy `RowPatches`, the second a lazy `Patches` held as F.unfold's
    [B, C*kh*kw, nH*nW] (the form above); a permute, then reshape / view / flatten to rank <= 4 becomes one
    rank <= 4 permute + reshape of that tensor (when the permuted axis order falls into <= 4 runs of the
    storage order b c i j h w, as ViT patchify and plain views do). A rank-5 reshape that only merges
    neighbouring axes (XFeat's `.reshape(B, C, nH, nW, kh * kw)` before its permute) stays lazy too, and
    later permutes move the merged axes as one. Any other consumer gets the original rank-6 tensor
    (materialised with torch functions off), so nothing is silently wrong.
NotImplemented (the original op runs): other outputs above rank 4, non-float tensors and arguments torch
would refuse.
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
    if isinstance(self, torch.Tensor) and self.is_floating_point() and self.dim() == 4 and \
            int(dimension) % 4 == 2 and 1 <= int(size) <= self.shape[2] and int(step) >= 1:
        return RowPatches(self, int(size), int(step))          # image patches: wait for .unfold(3, ...)
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


def _spread(x: torch.Tensor, step: int, dim: int) -> torch.Tensor:
    """x with step - 1 zero slices after each slice along `dim` (2 or 3 of a rank-4 tensor), the trailing ones
    cut: n slices -> (n - 1) * step + 1. Rank 4 throughout: the new axis sits next to `dim` in a merged view."""
    if step == 1:
        return x
    a, b, *rest = (int(v) for v in x.shape)
    n = rest[dim - 2]
    view = [a * b, *rest]
    view.insert(dim, 1)                              # (a*b, h, 1, w) or (a*b, h, w, 1)
    zeros = list(view)
    zeros[dim] = step - 1
    out = [a, b, *rest]
    out[dim] = n * step
    y = torch.cat([x.reshape(view), x.new_zeros(zeros)], dim).reshape(out)
    return y.narrow(dim, 0, (n - 1) * step + 1)


def col2im(cols: torch.Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """F.fold as kh * kw zero-spread, zero-padded planes added in tap order (module docstring); NotImplemented
    where it does not apply."""
    if not isinstance(cols, torch.Tensor) or cols.dim() not in (2, 3) or not cols.is_floating_point():
        return NotImplemented
    o, k, d, p, s = (_pair(v) for v in (output_size, kernel_size, dilation, padding, stride))
    if None in (o, k, d, p, s) or min(k) < 1 or min(d) < 1 or min(s) < 1 or min(p) < 0:
        return NotImplemented
    unbatched = cols.dim() == 2
    if unbatched:
        cols = cols.unsqueeze(0)
    n, ck, length = (int(v) for v in cols.shape)
    taps = k[0] * k[1]
    blocks = [(o[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)]
    if ck % taps or blocks[0] < 1 or blocks[1] < 1 or blocks[0] * blocks[1] != length:
        return NotImplemented                                                # torch raises its own error
    c = ck // taps
    padded = (o[0] + 2 * p[0], o[1] + 2 * p[1])
    grid = cols.reshape(n, c, taps * blocks[0], blocks[1])                  # tap t: rows t*nH .. (t+1)*nH - 1
    out = None
    for t in range(taps):
        i, j = divmod(t, k[1])
        plane = _spread(_spread(grid[:, :, t * blocks[0]:(t + 1) * blocks[0]], s[0], 2), s[1], 3)
        top, left = i * d[0], j * d[1]
        plane = F.pad(plane, (left, padded[1] - left - int(plane.shape[3]), top, padded[0] - top - int(plane.shape[2])))
        out = plane if out is None else out + plane
    out = out[:, :, p[0]:p[0] + o[0], p[1]:p[1] + o[1]]
    return out[0] if unbatched else out


@register_handler(F.fold, NAME)
def _f_fold_handler(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    return col2im(input, output_size, kernel_size, dilation, padding, stride)


def patch_unfold(model):
    """Wrap `model` so the unfold handlers apply (functional rewrites: `GpuRewriteWrapper(model,
    include=["patch_unfold"])`); named here so the symptom table can point at it."""
    from .functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[NAME])


# ---------------------------------------------------------------------------------------------
# chained image-patch unfolds: x.unfold(2, kh, sh).unfold(3, kw, sw) -> rank 6, carried lazily
# ---------------------------------------------------------------------------------------------

class _Lazy:
    """Tensor-like stand-in for an unfold result above rank 4; any op it does not follow materialises the
    original torch result (eager: right; export: the original rank-5/6 graph, as without the rewrite)."""

    def materialize(self) -> torch.Tensor:
        raise NotImplementedError

    @property
    def shape(self):
        return torch.Size(self._shape())

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self._shape())

    ndim = property(dim)

    def __getattr__(self, name):
        method = getattr(torch.Tensor, name)
        return lambda *args, **kwargs: _materialized(method, (self,) + args, kwargs)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _materialized(func, args, kwargs or {})


def _materialized(func, args, kwargs):
    def real(v):
        return v.materialize() if isinstance(v, _Lazy) else v
    return func(*(real(a) for a in args), **{k: real(v) for k, v in kwargs.items()})


class RowPatches(_Lazy):
    """x.unfold(2, kh, sh) of a 4-D x: [B, C, nH, W, kh], waiting for the .unfold(3, kw, sw) that makes patches."""

    def __init__(self, x, kh, sh):
        self.x, self.kh, self.sh = x, kh, sh

    def _shape(self):
        b, c, h, w = self.x.shape
        return (b, c, (h - self.kh) // self.sh + 1, w, self.kh)

    def materialize(self):
        with torch._C.DisableTorchFunction():              # the original op, not this rewrite again
            return self.x.unfold(2, self.kh, self.sh)

    def unfold(self, dimension, size, step):
        if int(dimension) % 5 != 3 or not 1 <= int(size) <= self.x.shape[3] or int(step) < 1:
            return self.materialize().unfold(dimension, size, step)
        return Patches(self.x, (self.kh, int(size)), (self.sh, int(step)))


class Patches(_Lazy):
    """[B, C, nH, nW, kh, kw] (logical axes b c h w i j) held as F.unfold's [B, C*kh*kw, nH*nW] (storage order
    b c i j h w), with a pending axis permutation; a reshape / view / flatten to rank <= 4 is one rank <= 4
    permute of the storage when the permuted order falls into <= 4 runs of consecutive storage axes.

    `groups` lets a rank-5 reshape that only merges neighbouring axes (XFeat's `.reshape(B, C, nH, nW, kh*kw)`
    before its permute) stay lazy: the axes in view order are `perm`, cut into groups of these lengths, and
    later permutes move whole groups."""

    _STORAGE = (0, 1, 4, 5, 2, 3)             # storage position of logical axis b c h w i j

    def __init__(self, x, k, s, perm=(0, 1, 2, 3, 4, 5), groups=None):
        self.x, self.k, self.s, self.perm = x, k, s, tuple(perm)
        self.groups = tuple(groups) if groups is not None else (1,) * 6

    def _logical(self):
        b, c, h, w = (int(v) for v in self.x.shape)
        (kh, kw), (sh, sw) = self.k, self.s
        return (b, c, (h - kh) // sh + 1, (w - kw) // sw + 1, kh, kw)

    def _split(self):
        """The view's axes: each a tuple of logical axes (one, or several merged)."""
        out, start = [], 0
        for n in self.groups:
            out.append(self.perm[start:start + n])
            start += n
        return out

    def _shape(self):
        sizes = self._logical()
        return tuple(int(np.prod([sizes[a] for a in g])) for g in self._split())

    def materialize(self):
        with torch._C.DisableTorchFunction():
            y = self.x.unfold(2, self.k[0], self.s[0]).unfold(3, self.k[1], self.s[1]).permute(*self.perm)
            return y if len(self.groups) == 6 else y.reshape(*self._shape())

    def permute(self, *dims):
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        split = self._split()
        moved = [split[int(d) % len(split)] for d in dims]
        return Patches(self.x, self.k, self.s, tuple(a for g in moved for a in g), tuple(len(g) for g in moved))

    def _merged(self, shape):
        """This view reshaped to `shape` by merging neighbouring axes only, or None when it is not that."""
        own = self._shape()
        if list(shape).count(-1) == 1:
            known = int(np.prod([v for v in shape if v != -1]))
            if known == 0 or int(np.prod(own)) % known:
                return None
            shape = [int(np.prod(own)) // known if v == -1 else int(v) for v in shape]
        groups, i = [], 0
        for want in (int(v) for v in shape):
            n, size = 0, 1
            while i + n < len(own) and (n == 0 or size < want):
                size *= own[i + n]
                n += 1
            if size != want:
                return None
            groups.append(sum(self.groups[i:i + n]))
            i += n
        return Patches(self.x, self.k, self.s, self.perm, groups) if i == len(own) else None

    def contiguous(self, *args, **kwargs):
        return self

    def _flat(self):
        """The data in this view's row-major order as a rank <= 4 tensor, or None."""
        order = [self._STORAGE[a] for a in self.perm]            # storage axes in the wanted order
        runs = [[order[0]]]
        for a in order[1:]:
            if a == runs[-1][-1] + 1:
                runs[-1].append(a)
            else:
                runs.append([a])
        if len(runs) > 4:
            return None
        sizes = self._logical()
        storage_sizes = [sizes[self.perm[order.index(p)]] for p in range(6)]
        by_start = sorted(runs, key=lambda r: r[0])
        u = im2col(self.x, self.k, 1, 0, self.s)                   # [B, C*kh*kw, nH*nW]
        u = u.reshape(*[int(np.prod([storage_sizes[a] for a in r])) for r in by_start])
        return u.permute(*[by_start.index(r) for r in runs])

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else shape
        if len(shape) > 4:
            merged = self._merged(shape)
            return self.materialize().reshape(*shape) if merged is None else merged
        flat = self._flat()
        if flat is None:
            return self.materialize().reshape(*shape)
        return flat.reshape(*shape)

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1):
        dims = list(self._shape())
        start, end = start_dim % len(dims), end_dim % len(dims)
        return self.reshape(*dims[:start], int(np.prod(dims[start:end + 1])), *dims[end + 1:])
