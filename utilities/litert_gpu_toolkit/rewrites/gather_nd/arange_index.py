"""Indexing by `torch.arange` positions as views, and per-row picks as one-hot sums: no GATHER_ND.

Hugging Face builds attention masks by indexing with broadcast aranges -- `padding_mask[batch_idx, kv_idx]`
with `batch_idx = arange(B)[:, None, None, None]`, `kv_idx = arange(S)[None, None, None, :]` (masking_utils
in transformers 5.x) -- and pools by picking one position per row -- `hidden[arange(B), eos_positions]`
(CLIP's pooler). litert-torch lowers both to GATHER_ND, which the GPU does not run.

`patch_index_arange` (default on, exact) takes an index whose tensors are aranges -- integer tensors that
depend on no input (their value is known: `index_math`) and hold consecutive integers along one axis, every
other axis of size 1 (`arange(a, b)`, shifted, viewed) -- on the leading axes of a runtime tensor:

  * all aranges: `src.narrow(...)` plus a permute / reshape -- a view, no arithmetic, bit-exact;
  * aranges plus ONE runtime index tensor (the per-row pick): the arange axes as views and the runtime
    axis as `sum_n (idx == n) * src[..., n, ...]` in float32, cast back -- exactly one non-zero
    term, so exact for finite values (integers below 2^24 in magnitude, bools); a non-finite value
    elsewhere on the picked axis turns that output into NaN (0 * inf). Out-of-range runtime indices
    give 0 where torch raises.

`torch.index_select(x, dim, arange(a, a + n))` (XLNet's relative shift) is `x.narrow(dim, a, n)`: bit-exact.
`F.one_hot(x, n)` of a runtime integer tensor (XLNet's segment matrix) is `relu(1 - |x[..., None] - arange(n)|)` in
float32, as int64: exact for indices in [0, n) below 2^24 (torch raises outside [0, n)). litert-torch's own lowering
emits an `_assert_async` it cannot convert (CONVERT_FAIL); `x[..., None] == arange(n)` is fused back into a
ONE_HOT by the converter, which the GPU rejects.

Anything else (no arange index, two runtime indices, a result above rank 4) is left to the other
rewrites (`patch_index_onehot`, opt-in). Functional only: active inside `GpuRewriteWrapper` /
`convert_for_gpu`.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .. import Change, register
from ..functional import HANDLERS
from .index_math import fold_entry, real_values, value_of

MAX_PICK_ELEMENTS = 1 << 22


def arange_offset(t) -> int | None:
    """The first value of an integer tensor that depends on no input and holds consecutive integers along
    one axis (every other axis of size 1) -- an arange, viewed or shifted -- else None."""
    v = value_of(t)
    if v is None or v.dtype not in (torch.int64, torch.int32) or sum(int(s) != 1 for s in v.shape) > 1 \
            or v.numel() < 1:
        return None
    with real_values():
        flat = v.reshape(-1)
        first = int(flat[0])
        return first if torch.equal(flat, torch.arange(first, first + flat.numel(), dtype=v.dtype)) else None


# ------------------------------------------------------------------------------------ indexing

def _leading_tensors(src, key):
    """The leading index tensors of `src[key]` (tensors first, then only full slices / Ellipsis), else None."""
    key = key if isinstance(key, tuple) else (key,)
    k = 0
    while k < len(key) and isinstance(key[k], torch.Tensor):
        if key[k].dtype not in (torch.int64, torch.int32):           # (uint8 / bool index = a mask)
            return None
        k += 1
    if k == 0 or k > src.dim() or not all(r == slice(None) or r is Ellipsis for r in key[k:]):
        return None
    return list(key[:k])


def _axis(t: torch.Tensor, rank: int) -> int | None:
    """The axis (of the broadcast index shape, rank `rank`) along which the marked `t` runs; None for length 1."""
    for d, s in enumerate(t.shape):
        if int(s) != 1:
            return rank - t.dim() + d
    return None


def index_by_arange(src: torch.Tensor, indices: list[torch.Tensor], offsets: list[int | None]) -> torch.Tensor:
    """`src[indices]` where indices[k] is `offsets[k] + arange` along one axis (offsets[k] not None) or a
    runtime integer tensor (offsets[k] None; at most one). See the module docstring for the bound."""
    shape = tuple(int(s) for s in torch.broadcast_shapes(*(i.shape for i in indices)))
    r, k_n = len(shape), len(indices)
    rest = tuple(int(s) for s in src.shape[k_n:])
    runtime = [k for k, o in enumerate(offsets) if o is None]
    s = src
    for k, off in enumerate(offsets):                       # the marked axes: their window of src
        if off is not None:
            s = s.narrow(k, off, int(indices[k].numel()))
    # place every marked axis at its output axis, the runtime axis (if any) after the index axes
    order, layout = [], [1] * r + ([1] if runtime else [])
    def place(k):
        ax = _axis(indices[k], r)
        return r if offsets[k] is None else (-1 if ax is None else ax)

    for k in sorted(range(k_n), key=place):
        order.append(k)
        if offsets[k] is None:
            layout[r] = int(src.shape[k])
        else:
            ax = _axis(indices[k], r)
            if ax is not None:
                layout[ax] = int(indices[k].numel())
    s = s.permute(*order, *range(k_n, s.dim())).reshape(*layout, *rest)
    if not runtime:
        return s
    n = int(src.shape[runtime[0]])
    idx = indices[runtime[0]].to(torch.int32)
    idx = idx.reshape((1,) * (r - idx.dim()) + tuple(idx.shape))
    onehot = (idx.unsqueeze(-1) == torch.arange(n, dtype=torch.int32)).to(torch.float32)
    onehot = onehot.reshape(*onehot.shape, *([1] * len(rest)))
    out = (onehot * s.to(torch.float32)).sum(r)
    return out > 0.5 if src.dtype == torch.bool else out.to(src.dtype)


def _plan(src, key):
    """(indices, offsets) when `src[key]` is an index this rewrite takes, else None."""
    if not isinstance(src, torch.Tensor) or src.dtype.is_complex:
        return None
    indices = _leading_tensors(src, key)
    if indices is None:
        return None
    offsets = [arange_offset(i) for i in indices]
    if all(o is None for o in offsets) or sum(o is None for o in offsets) > 1:
        return None
    try:
        shape = torch.broadcast_shapes(*(i.shape for i in indices))
    except RuntimeError:
        return None
    r = len(shape)
    axes = [_axis(i, r) for i, o in zip(indices, offsets) if o is not None]
    axes = [a for a in axes if a is not None]
    if len(set(axes)) != len(axes):                  # two aranges on one axis: a diagonal, not a view
        return None
    for k, (i, o) in enumerate(zip(indices, offsets)):
        if o is not None and (o < 0 or o + i.numel() > int(src.shape[k])):
            return None
    if any(o is None for o in offsets):
        rest = src.dim() - len(indices)
        k = offsets.index(None)
        if r + 1 + rest > 4 or math.prod(shape) * int(src.shape[k]) * max(1, math.prod(src.shape[len(indices):])) \
                > MAX_PICK_ELEMENTS:
            return None
    return indices, offsets


def _getitem(src, key):
    plan = _plan(src, key)
    if plan is None:
        return NotImplemented
    return index_by_arange(src, *plan)


def _index_select(src, dim, index, *, out=None):
    start = arange_offset(index) if isinstance(index, torch.Tensor) and index.dim() == 1 else None
    if out is not None or start is None or not isinstance(src, torch.Tensor) or start < 0 \
            or not isinstance(dim, int) or start + index.shape[0] > src.shape[dim]:
        return NotImplemented                         # out of range: torch's own call raises as it would
    return src.narrow(dim, start, index.shape[0])


def _one_hot(tensor, num_classes=-1):
    if not isinstance(tensor, torch.Tensor) or value_of(tensor) is not None or num_classes <= 0:
        return NotImplemented
    from ..functional import in_active_mode

    def spelled():      # relu(1 - |x - k|): an EQUAL against an arange would be fused back into ONE_HOT
        x = tensor.to(torch.float32).unsqueeze(-1)
        return torch.relu(1 - (x - torch.arange(num_classes, dtype=torch.float32)).abs()).to(torch.int64)

    return in_active_mode(spelled)


for _f in (torch.index_select, torch.Tensor.index_select):
    HANDLERS.setdefault(_f, []).append(("patch_index_arange", _index_select))
HANDLERS.setdefault(torch.nn.functional.one_hot, []).append(("patch_index_arange", _one_hot))

# first the folding of index math, then this, then patch_index_onehot's handler on the same callable
HANDLERS.setdefault(torch.Tensor.__getitem__, [])[:0] = [fold_entry(torch.Tensor.__getitem__),
                                                         ("patch_index_arange", _getitem)]


@register("patch_index_arange", wall="gather_nd")
def patch_index_arange(model: nn.Module) -> list[Change]:
    """Indexing has no module form: the rewrite happens inside `GpuRewriteWrapper` / `convert_for_gpu`
    (handler "patch_index_arange") or by calling `index_by_arange`. See the module docstring."""
    return []
