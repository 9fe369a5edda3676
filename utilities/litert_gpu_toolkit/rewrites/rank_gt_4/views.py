"""The functional handler "lower_rank_views": rank > 4 view / permute chains written inline in a forward.

Bit-exact: the real tensors carry on, only their rank <= 4 spelling is traced.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import declare, register_handler
from .lowrank import MAX_RANK, VIEWS_HANDLER, _prod, lowrank_permute


# ---------------------------------------------------------------------------------------------
# "lower_rank_views": following rank > 4 views through a forward
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _Lazy:
    """What a rank > 4 tensor is made of: base.reshape(elem).permute(perm), regrouped into output
    axes; counts[i] = how many consecutive permuted elementary axes form output axis i (0 = an
    axis of size 1). `base` always has rank <= 4."""
    base: torch.Tensor
    elem: tuple[int, ...]
    perm: tuple[int, ...]
    counts: tuple[int, ...]

    def groups(self) -> list[list[int]]:
        """Output axis -> positions in `perm`."""
        out, pos = [], 0
        for c in self.counts:
            out.append(list(range(pos, pos + c)))
            pos += c
        return out

    def shape(self) -> list[int]:
        return [_prod(self.elem[self.perm[j]] for j in g) for g in self.groups()]

    @property
    def identity(self) -> bool:
        return list(self.perm) == sorted(self.perm)

    def materialize(self) -> torch.Tensor:
        return lowrank_permute(self.base, self.elem, self.perm, self.shape())


def _plain(base: torch.Tensor, shape: Sequence[int]) -> _Lazy:
    """`base` reshaped to `shape` (no permutation)."""
    elem = tuple(int(s) for s in base.shape) or (1,)
    lazy = _regroup(_Lazy(base, elem, tuple(range(len(elem))), (len(elem),)), shape)
    if lazy is None:                                   # cannot happen for a plain reshape
        raise AssertionError(f"cannot regroup {tuple(base.shape)} as {tuple(shape)}")
    return lazy


def _regroup(lazy: _Lazy, new_shape: Sequence[int]) -> _Lazy | None:
    """The same data reshaped to `new_shape`, splitting elementary axes where the reshape splits
    them; None when the reshape merges parts of different axes that are not neighbours in memory."""
    permuted = [lazy.elem[p] for p in lazy.perm]
    live = [j for j, size in enumerate(permuted) if size != 1]     # size-1 axes carry no data
    parts: dict[int, list[int]] = {j: [] for j in live}             # permuted axis -> its split sizes
    counts: list[int] = []
    pos = 0
    remaining = permuted[live[0]] if live else 1
    for target in (int(t) for t in new_shape):
        count, need = 0, target
        while need > 1:
            if pos >= len(live):
                return None
            j = live[pos]
            if need % remaining == 0:                  # this axis (what is left of it) fits whole
                parts[j].append(remaining)
                need //= remaining
                pos += 1
                remaining = permuted[live[pos]] if pos < len(live) else 1
            elif remaining % need == 0:                # split this axis
                parts[j].append(need)
                remaining //= need
                need = 1
            else:
                return None
            count += 1
        counts.append(count)
    if pos != len(live):
        return None
    # new elementary axes in base memory order: each old axis replaced by its parts
    new_elem: list[int] = []
    where: dict[tuple[int, int], int] = {}
    position_of = {p: j for j, p in enumerate(lazy.perm)}
    for axis in range(len(lazy.elem)):
        j = position_of[axis]
        for k, size in enumerate(parts.get(j, ())):
            where[(j, k)] = len(new_elem)
            new_elem.append(size)
    new_perm = [where[(j, k)] for j in live for k in range(len(parts[j]))]
    if not new_elem:
        return _Lazy(lazy.base, (1,), (0,), tuple(0 for _ in counts))
    return _Lazy(lazy.base, tuple(new_elem), tuple(new_perm), tuple(counts))


# tensor id -> (weak reference, what it is made of); entries go when the tensor goes
_TRACKED: dict[int, tuple[weakref.ref, _Lazy]] = {}


def _lazy_of(t) -> _Lazy | None:
    if not isinstance(t, torch.Tensor):
        return None
    entry = _TRACKED.get(id(t))
    if entry is None or entry[0]() is not t:
        return None
    return entry[1]


def _track(real: torch.Tensor, lazy: _Lazy) -> torch.Tensor:
    key = id(real)
    _TRACKED[key] = (weakref.ref(real, lambda _ref, key=key: _TRACKED.pop(key, None)), lazy)
    return real


def _finish(real_fn, lazy: _Lazy):
    """The rank <= 4 form when the result is back at rank <= 4; else the real (high-rank) result,
    tracked. The high-rank ops behind `real_fn` are dropped by the converter when unused."""
    if len(lazy.counts) <= MAX_RANK:
        return lazy.materialize()
    return _track(real_fn(), lazy)


def _shape_arg(shape) -> list:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        return list(shape[0])
    return list(shape)


def _resolve(shape: list, numel: int) -> list[int]:
    shape = [int(s) for s in shape]
    if -1 in shape:
        known = _prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return shape


def _reshaped(x: torch.Tensor, new_shape: list):
    """Handler core for every reshape-like call (view, reshape, flatten, unsqueeze, ...)."""
    lazy = _lazy_of(x)
    if lazy is None:
        if len(new_shape) <= MAX_RANK or x.dim() > MAX_RANK:
            return NotImplemented
        lazy = _plain(x, list(x.shape))
    new_shape = _resolve(new_shape, x.numel())
    regrouped = _regroup(lazy, new_shape)
    if regrouped is None:
        return NotImplemented
    return _finish(lambda: x.reshape(new_shape), regrouped)


def _on_view(x, *shape):
    shape = _shape_arg(shape)
    if any(isinstance(s, torch.dtype) for s in shape):
        return NotImplemented
    return _reshaped(x, shape)


def _on_reshape(x, *shape, **kwargs):
    return _reshaped(x, _shape_arg(shape or (kwargs["shape"],)))


def _on_reshape_as(x, other):           # RoFormer's rotary halves: stack(..., -1).reshape_as(q)
    return _reshaped(x, list(other.shape)) if isinstance(other, torch.Tensor) else NotImplemented


def _on_flatten(x, start_dim=0, end_dim=-1):
    if _lazy_of(x) is None or not isinstance(start_dim, int):
        return NotImplemented
    shape = list(x.shape)
    s, e = start_dim % len(shape), end_dim % len(shape)
    return _reshaped(x, shape[:s] + [_prod(shape[s:e + 1])] + shape[e + 1:])


def _on_unflatten(x, dim, sizes):
    shape = list(x.shape)
    d = dim % len(shape)
    return _reshaped(x, shape[:d] + _resolve(list(sizes), shape[d]) + shape[d + 1:])


def _on_unsqueeze(x, dim):
    shape = list(x.shape)
    d = dim % (len(shape) + 1)
    return _reshaped(x, shape[:d] + [1] + shape[d:])


def _on_squeeze(x, dim=None):
    if _lazy_of(x) is None:
        return NotImplemented
    shape = list(x.shape)
    dims = range(len(shape)) if dim is None else (dim if isinstance(dim, (tuple, list)) else (dim,))
    drop = {d % len(shape) for d in dims if shape[d % len(shape)] == 1}
    return _reshaped(x, [s for i, s in enumerate(shape) if i not in drop])


def _permuted(x: torch.Tensor, order: list[int]):
    lazy = _lazy_of(x)
    if lazy is None:
        return NotImplemented
    order = [int(o) % len(lazy.counts) for o in order]
    groups = lazy.groups()
    new = _Lazy(lazy.base, lazy.elem, tuple(lazy.perm[j] for o in order for j in groups[o]),
                tuple(lazy.counts[o] for o in order))
    return _finish(lambda: x.permute(order), new)


def _on_permute(x, *dims):
    return _permuted(x, _shape_arg(dims))


def _on_transpose(x, dim0, dim1):
    if _lazy_of(x) is None:
        return NotImplemented
    order = list(range(x.dim()))
    a, b = dim0 % x.dim(), dim1 % x.dim()
    order[a], order[b] = order[b], order[a]
    return _permuted(x, order)


def _on_contiguous(x, *args, **kwargs):
    lazy = _lazy_of(x)
    if lazy is None:
        return NotImplemented
    return _track(x.contiguous(*args, **kwargs), lazy)


def _selected(x: torch.Tensor, dim: int, index: int):
    """x.select(dim, index) of a tracked x: fix the elementary axes that make up output axis `dim`."""
    lazy = _lazy_of(x)
    dim = dim % len(lazy.counts)
    index = int(index) % lazy.shape()[dim]
    axes = [lazy.perm[j] for j in lazy.groups()[dim]]          # elementary axes, major first
    fixed, rest = {}, index
    for e in reversed(axes):
        fixed[e] = rest % lazy.elem[e]
        rest //= lazy.elem[e]
    base, elem, perm = lazy.base, list(lazy.elem), list(lazy.perm)
    for e in sorted(fixed, reverse=True):                       # highest first keeps lower indices valid
        base = base.reshape(_prod(elem[:e]), elem[e], _prod(elem[e + 1:]))[:, fixed[e]]
        del elem[e]
        perm = [p - (p > e) for p in perm if p != e]
    counts = tuple(c for i, c in enumerate(lazy.counts) if i != dim)
    new = _Lazy(base, tuple(elem), tuple(perm), counts) if elem else _Lazy(base, (1,), (0,), counts)
    return _finish(lambda: x.select(dim, index), new)


def _on_select(x, dim, index):
    return NotImplemented if _lazy_of(x) is None else _selected(x, dim, index)


def _on_getitem(x, index):
    """Integer indices on any axes, the rest full slices or one Ellipsis (`qkv[..., 0, :]`, BLOOM's packed QKV)."""
    if _lazy_of(x) is None:
        return NotImplemented
    index = index if isinstance(index, tuple) else (index,)
    if sum(i is Ellipsis for i in index) > 1 or not all(i is Ellipsis or isinstance(i, int) or i == slice(None)
                                                        for i in index):
        return NotImplemented
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.dim() - len(index) + 1) + index[k + 1:]
    picks = [(d, i) for d, i in enumerate(index) if isinstance(i, int)]
    if not picks or len(index) > x.dim():
        return NotImplemented
    out = x
    for d, i in reversed(picks):                       # the highest axis first keeps the lower axis numbers valid
        out = _selected(out, d, i) if _lazy_of(out) is not None else out.select(d, i)
    return out


def _on_unbind(x, dim=0):
    if _lazy_of(x) is None:
        return NotImplemented
    return tuple(_selected(x, dim, i) for i in range(x.shape[dim]))


def _is_scalar(v) -> bool:
    return not isinstance(v, torch.Tensor) or v.dim() == 0


def _binary(op):
    """Broadcast elementwise op with a tracked operand: done at rank <= 4 by merging neighbouring
    axes that both operands broadcast the same way (e.g. the Swin mask add (B, nW, heads, N, N) +
    (1, nW, 1, N, N) -> (B, nW, heads, N*N) + (1, nW, 1, N*N))."""
    def handler(a, b, *args, **kwargs):
        la, lb = _lazy_of(a), _lazy_of(b)
        if la is None and lb is None:
            return NotImplemented
        if _is_scalar(a) or _is_scalar(b):                 # commutes with any reshape / permute
            lazy = la if la is not None else lb
            small = op(lazy.base, b, *args, **kwargs) if la is not None else op(a, lazy.base, *args, **kwargs)
            return _track(op(a, b, *args, **kwargs), _Lazy(small, lazy.elem, lazy.perm, lazy.counts))
        if any(lz is not None and not lz.identity for lz in (la, lb)):
            return NotImplemented
        out = [int(n) for n in torch.broadcast_shapes(a.shape, b.shape)]
        sa = [1] * (len(out) - a.dim()) + [int(n) for n in a.shape]
        sb = [1] * (len(out) - b.dim()) + [int(n) for n in b.shape]
        merged: list[list[int]] = []
        kind_of_group: list[tuple[bool, bool] | None] = []
        for i, n in enumerate(out):
            kind = None if n == 1 else (sa[i] == n, sb[i] == n)
            if merged and (kind is None or kind_of_group[-1] in (None, kind)):
                merged[-1].append(i)
                kind_of_group[-1] = kind_of_group[-1] or kind
            else:
                merged.append([i])
                kind_of_group.append(kind)
        if len(merged) > MAX_RANK:
            return NotImplemented

        def squash(value, lazy, shape):
            return (lazy.base if lazy is not None else value).reshape([_prod(shape[i] for i in g) for g in merged])

        small = op(squash(a, la, sa), squash(b, lb, sb), *args, **kwargs)
        return _finish(lambda: small.reshape(out), _plain(small, out))
    return handler


for _fns, _handler in (
        ((torch.Tensor.view,), _on_view),
        ((torch.Tensor.reshape, torch.reshape), _on_reshape),
        ((torch.Tensor.reshape_as, torch.Tensor.view_as), _on_reshape_as),
        ((torch.Tensor.flatten, torch.flatten), _on_flatten),
        ((torch.Tensor.unflatten, torch.unflatten), _on_unflatten),
        ((torch.Tensor.unsqueeze, torch.unsqueeze), _on_unsqueeze),
        ((torch.Tensor.squeeze, torch.squeeze), _on_squeeze),
        ((torch.Tensor.permute, torch.permute), _on_permute),
        ((torch.Tensor.transpose, torch.transpose), _on_transpose),
        ((torch.Tensor.contiguous,), _on_contiguous),
        ((torch.Tensor.select, torch.select), _on_select),
        ((torch.Tensor.__getitem__,), _on_getitem),
        ((torch.Tensor.unbind, torch.unbind), _on_unbind),
        ((torch.Tensor.add, torch.add), _binary(torch.add)),
        ((torch.Tensor.sub, torch.sub), _binary(torch.sub)),
        ((torch.Tensor.mul, torch.mul), _binary(torch.mul)),
        ((torch.Tensor.div, torch.div), _binary(torch.div)),
        ((torch.Tensor.__rsub__,), _binary(lambda a, b: torch.sub(b, a))),
        ((torch.Tensor.__rdiv__,), _binary(lambda a, b: torch.div(b, a)))):
    for _fn in _fns:
        register_handler(_fn, VIEWS_HANDLER)(_handler)


def lower_rank_views(model: nn.Module) -> nn.Module:
    """Wrap `model` so that rank > 4 view / permute chains written inline in its forward (window
    partition, packed QKV, einops.rearrange, broadcast adds on rank-5 views) are lowered to rank
    <= 4 while the wrapper runs -- including under torch.export / litert-torch. Bit-exact.

    Only the "lower_rank_views" handler is active in this wrapper; `GpuRewriteWrapper(model)`
    applies it together with every other functional rewrite.
    """
    from ..functional import GpuRewriteWrapper

    return GpuRewriteWrapper(model, include=[VIEWS_HANDLER])


# In-place ops could make what a tracked tensor is "made of" stale (a copy mutated after it was
# recorded). Any in-place call while something is tracked drops all tracking: the forward stays
# correct (the real tensors carry on), only the lowering of that chain is given up. A functional op with an
# `inplace` flag drops it only when the flag is set; dropout that does nothing (eval, or p = 0) returns its
# tracked input as it is (VOLO's attention dropout sits between a rank-5 softmax and its matmul).
def _forget_on_inplace(*args, **kwargs):
    _TRACKED.clear()
    return NotImplemented


def _forget_if_inplace(fn):
    import inspect

    try:
        position = list(inspect.signature(fn).parameters).index("inplace")
    except (ValueError, TypeError):
        return _forget_on_inplace

    def handler(*args, **kwargs):
        if kwargs.get("inplace") or (len(args) > position and args[position] is True):
            _TRACKED.clear()
        return NotImplemented
    return handler


def _on_dropout(input, p=0.5, training=True, inplace=False):
    if inplace:
        _TRACKED.clear()
        return NotImplemented
    if (not training or p == 0) and _lazy_of(input) is not None:
        return input
    return NotImplemented


_DROPOUTS = ("dropout", "alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout")


def _inplace_callables():
    names = [n for n in dir(torch.Tensor) if n.endswith("_") and not n.startswith("_")]
    names += ["__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
              "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"]
    return [getattr(torch.Tensor, n) for n in names if hasattr(torch.Tensor, n)]


for _fn in _inplace_callables():
    register_handler(_fn, VIEWS_HANDLER)(_forget_on_inplace)
for _name in ("relu", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "silu",
              "mish", "threshold", "rrelu"):
    if hasattr(F, _name):
        register_handler(getattr(F, _name), VIEWS_HANDLER)(_forget_if_inplace(getattr(F, _name)))
for _name in _DROPOUTS:
    if hasattr(F, _name):
        register_handler(getattr(F, _name), VIEWS_HANDLER)(_on_dropout)


declare(VIEWS_HANDLER, wall="rank_gt_4")
