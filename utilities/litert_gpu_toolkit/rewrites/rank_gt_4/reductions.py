""""lower_rank_views", continued: reductions, softmax and elementwise maps of a rank > 4 view.

`views.py` follows reshapes / permutes / selects / broadcasts of a rank > 4 view and materialises the chain once
it is back at rank <= 4. Models also *compute* on the rank-5 view before it comes back: ResNeSt's split attention
sums a (B, radix, C, H, W) view over the radix axis, radix softmax normalises one axis of a rank-5 view, an
activation runs on it in between. Each of those is done here on the rank <= 4 tensor behind the view:

  * a map (sigmoid, relu, exp, gelu, ...) commutes with any reshape / permute: it runs on the base tensor and the
    view is kept;
  * a reduction (sum, mean, amax, amin) over some axes of a plain (unpermuted) view: neighbouring axes that are
    all reduced or all kept merge, which leaves at most 4 axes in the usual cases; the reduction runs there;
  * softmax / log_softmax over one axis of any view, permuted too (VOLO's outlook attention normalises a permuted
    (B, heads, blocks, k*k, k*k) view): the axes before it merge, and so do those after it (a rank-3 softmax over
    the middle axis; the permute is done at rank <= 4 first).

Bound: maps and the softmax of a plain view are bit-exact (the same elements, the same arithmetic); the softmax of
a permuted view runs over another memory layout, for which torch's CPU kernel rounds its exp / sum differently
(measured rel <= 3e-7, a few fp32 ulps); a reduction adds the same
elements, possibly in another order (fp32 rounding of the sum: relative error <= n * 2^-24 for n terms, measured
bit-exact on the tests' shapes). Anything else (a permuted view under a reduction, more than 4 merged groups)
returns NotImplemented and is left as it was.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..registry import register_handler
from .lowrank import MAX_RANK, VIEWS_HANDLER, _prod, lowrank_permute
from .views import _finish, _Lazy, _lazy_of, _plain, _track


def _plain_view(x):
    """The base tensor behind a tracked, unpermuted view of x (then x == base.reshape(x.shape)), else None."""
    lazy = _lazy_of(x)
    return None if lazy is None or not lazy.identity else lazy.base


def _merge(shape: list[int], kind_of) -> list[tuple[object, list[int]]]:
    """Neighbouring axes of the same kind merge; a size-1 axis joins whichever group it is next to."""
    groups: list[tuple[object, list[int]]] = []
    for i, n in enumerate(shape):
        kind = None if n == 1 else kind_of(i)
        if groups and (kind is None or groups[-1][0] in (None, kind)):
            groups[-1] = (groups[-1][0] if kind is None else kind, groups[-1][1] + [i])
        else:
            groups.append((kind, [i]))
    return groups


def _reduction(op):
    def handler(x, dim=None, keepdim=False, *args, **kwargs):
        base = _plain_view(x)
        if base is None or dim is None or args:
            return NotImplemented
        shape = [int(n) for n in x.shape]
        dims = {d % len(shape) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
        groups = _merge(shape, lambda i: i in dims)
        if len(groups) > MAX_RANK:
            return NotImplemented
        merged = base.reshape([_prod(shape[i] for i in g) for _, g in groups])
        reduced = [j for j, (kind, _) in enumerate(groups) if kind is True]
        small = op(merged, dim=reduced, keepdim=True, **kwargs) if reduced else merged
        out = [1 if i in dims else n for i, n in enumerate(shape)]
        if not keepdim:
            out = [n for i, n in enumerate(out) if i not in dims]
        if len(out) <= MAX_RANK:
            return small.reshape(out)
        return _track(small.reshape(out), _plain(small, out))
    return handler


def _softmax(op):
    def handler(x, dim=None, *args, **kwargs):
        lazy = _lazy_of(x)
        if lazy is None or dim is None or args or kwargs.get("dtype") is not None:
            return NotImplemented
        shape = [int(n) for n in x.shape]
        d = dim % len(shape)
        if shape[d] == 1:              # a softmax over one element is 1 (log_softmax 0): no DIV(e, e) on the GPU
            from ..shared import constant, real_values
            with real_values():
                small = torch.full((_prod(shape[:d]), 1, _prod(shape[d + 1:])), 1.0 if op is torch.softmax else 0.0,
                                   dtype=x.dtype)
            small = constant(small)
        else:
            # the axes before `dim` merge, and so do those after it: a reshape of the permuted view, so any view works
            merged = [_prod(shape[:d]), shape[d], _prod(shape[d + 1:])]
            small = op(lowrank_permute(lazy.base, lazy.elem, lazy.perm, merged), dim=1)
        return _finish(lambda: small.reshape(shape), _plain(small, shape))
    return handler


def _map(fn):
    def handler(x, *args, **kwargs):
        lazy = _lazy_of(x)
        if lazy is None or kwargs.get("inplace") or any(isinstance(a, torch.Tensor) for a in args):
            return NotImplemented
        return _track(fn(x, *args, **kwargs), _Lazy(fn(lazy.base, *args, **kwargs), lazy.elem, lazy.perm,
                                                    lazy.counts))
    return handler


def _amax(x, dim, keepdim=False):
    return torch.amax(x, dim=dim, keepdim=keepdim)


def _amin(x, dim, keepdim=False):
    return torch.amin(x, dim=dim, keepdim=keepdim)


_REDUCTIONS = (((torch.sum, torch.Tensor.sum), torch.sum), ((torch.mean, torch.Tensor.mean), torch.mean),
               ((torch.amax, torch.Tensor.amax), _amax), ((torch.amin, torch.Tensor.amin), _amin))
_SOFTMAX = (((torch.softmax, torch.Tensor.softmax, F.softmax), torch.softmax),
            ((torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax), torch.log_softmax))
# elementwise maps with no in-place flag (F.relu / F.silu / ... have one: views.py drops tracking on those)
_MAPS = (torch.sigmoid, torch.Tensor.sigmoid, torch.relu, torch.Tensor.relu, torch.exp, torch.Tensor.exp,
         torch.tanh, torch.Tensor.tanh, torch.neg, torch.Tensor.neg, torch.Tensor.__neg__, torch.abs,
         torch.Tensor.abs, torch.sqrt, torch.Tensor.sqrt, torch.rsqrt, torch.Tensor.rsqrt, F.gelu)

for _fns, _op in _REDUCTIONS:
    for _fn in _fns:
        register_handler(_fn, VIEWS_HANDLER)(_reduction(_op))
for _fns, _op in _SOFTMAX:
    for _fn in _fns:
        register_handler(_fn, VIEWS_HANDLER)(_softmax(_op))
for _fn in _MAPS:
    register_handler(_fn, VIEWS_HANDLER)(_map(_fn))
