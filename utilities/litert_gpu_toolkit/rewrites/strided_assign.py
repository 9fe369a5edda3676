"""Wall `strided_assign`: assignment into a strided slice (`y[:, 2::3] = v`) -> STABLEHLO_PAD, rejected by the GPU.

The converter writes the scatter as a pad with interior padding (STABLEHLO_PAD: 'Operation is not supported' on
llvmpipe, ai-edge-litert 2.3.0). YOLO pose heads decode their keypoints this way (`y[:, 2::ndim] =
y[:, 2::ndim].sigmoid()`).

`patch_strided_assign` (default, functional) handles `x[..., a::s, ...] = v` with one stepped slice whose axis
length is a multiple of s (and a < s, to the end): the axis is viewed as (n, s), component a is replaced by `v`
with a concatenation of slices, and the result viewed back and copied into x. Exact (copies only). The view adds
one axis, so x must have rank <= 3.
"""
from __future__ import annotations

import torch
from torch import nn

from . import Change, register
from .functional import register_handler


def strided_assign(x: torch.Tensor, dim: int, start: int, step: int, value) -> torch.Tensor:
    """x with x[..., start::step (on `dim`), ...] replaced by `value` (a tensor of that slice's shape or a number),
    without a scatter: the axis viewed as (n, step), component `start` swapped by concatenation."""
    shape = list(x.shape)
    n = shape[dim] // step
    grouped = x.reshape(shape[:dim] + [n, step] + shape[dim + 1:])
    if not isinstance(value, torch.Tensor):
        value = torch.full(shape[:dim] + [n] + shape[dim + 1:], float(value), dtype=x.dtype)
    value = value.to(x.dtype).expand(shape[:dim] + [n] + shape[dim + 1:]).unsqueeze(dim + 1)
    parts = [grouped.narrow(dim + 1, 0, start), value, grouped.narrow(dim + 1, start + 1, step - start - 1)]
    return torch.cat([p for p in parts if p.shape[dim + 1]], dim + 1).reshape(shape)


def _stepped(x: torch.Tensor, key) -> tuple[int, int, int] | None:
    """(dim, start, step) when `key` is full slices / one Ellipsis and one slice start::step to the end."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1 or not all(k is Ellipsis or isinstance(k, slice) for k in key):
        return None
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (x.dim() - len(key) + 1) + key[i + 1:]
    stepped = [(d, k) for d, k in enumerate(key) if k != slice(None)]
    if len(stepped) != 1 or len(key) > x.dim():
        return None
    d, k = stepped[0]
    start, stop, step = k.start or 0, k.stop, k.step or 1
    if step <= 1 or stop is not None or not 0 <= start < step or int(x.shape[d]) % step:
        return None
    return d, start, step


@register_handler(torch.Tensor.__setitem__, "patch_strided_assign")
def _setitem(self, key, value):
    if not isinstance(self, torch.Tensor) or not self.dtype.is_floating_point or self.dim() > 3:
        return NotImplemented
    found = _stepped(self, key)
    if found is None or not (isinstance(value, (int, float)) or isinstance(value, torch.Tensor)):
        return NotImplemented
    d, start, step = found
    try:
        new = strided_assign(self, d, start, step, value)
    except RuntimeError:                           # a value that does not broadcast to the slice: torch says why
        return NotImplemented
    self.copy_(new)
    return None


@register("patch_strided_assign", wall="strided_assign")
def patch_strided_assign(model: nn.Module) -> list[Change]:
    """Functional only (see the module docstring): returns no changes by itself."""
    return []
