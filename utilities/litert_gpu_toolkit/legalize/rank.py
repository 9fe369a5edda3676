"""Rule: every value of rank > 4 is carried at rank <= 4 (the GPU takes no tensor of higher rank).

Each op that reads or makes such a value is computed on views of its operands whose adjacent axes are merged,
chosen for that op: two neighbouring axes may merge unless the op separates them -- a reduced axis next to a kept
one, a sliced, concatenated, padded or softmax axis next to any other, an axis one operand broadcasts next to one it
does not, the matrix axes of a matmul. The op's result is viewed back to its logical shape, and the next op views it
to its own merge; two views in a row are one reshape, so between two ops there is at most one RESHAPE (at rank
<= 4 on both sides) where their merges disagree, and none where they agree. A permutation of more than four
merged axes is written as rank-4 permutes, each moving one axis block to its place ([A, B, C, D] -> [A, C, B, D]),
with reshapes between. A roll over several axes is one roll per axis, each on a view where its axis stands alone.

Bit-exact: a view of a contiguous tensor is the same elements in the same order, and each op computes the same
values on the merged view (a reduction or softmax over the same elements, in the same order within each merged
axis; a matmul's batch axes are independent). An op the rule does not know, or that would need more than four
merged axes, is left as it was and named by the driver's audit.
"""
from __future__ import annotations

import math
import operator

import torch

from .nodes import shape

_aten = torch.ops.aten
MAX_RANK = 4
# shape changes, and the ops that pass a value through unchanged: the rule leaves both to the view collapse
_RESHAPES = {_aten.view.default, _aten._unsafe_view.default, _aten.reshape.default, _aten.unsqueeze.default,
             _aten.squeeze.dim, _aten.squeeze.dims, _aten.squeeze.default}
_VIEWS = _RESHAPES | {_aten.clone.default, _aten.alias.default}
_ELEMENTWISE = {
    _aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor, _aten.rsub.Tensor, _aten.rsub.Scalar,
    _aten.add.Scalar, _aten.sub.Scalar, _aten.mul.Scalar, _aten.div.Scalar, _aten.pow.Tensor_Scalar,
    _aten.pow.Tensor_Tensor, _aten.maximum.default, _aten.minimum.default, _aten.where.self,
    _aten.eq.Tensor, _aten.ne.Tensor, _aten.lt.Tensor, _aten.le.Tensor, _aten.gt.Tensor, _aten.ge.Tensor,
    _aten.eq.Scalar, _aten.ne.Scalar, _aten.lt.Scalar, _aten.le.Scalar, _aten.gt.Scalar, _aten.ge.Scalar,
    _aten.relu.default, _aten.gelu.default, _aten.silu.default, _aten.sigmoid.default, _aten.tanh.default,
    _aten.exp.default, _aten.log.default, _aten.neg.default, _aten.abs.default, _aten.sqrt.default,
    _aten.rsqrt.default, _aten.reciprocal.default, _aten.clamp.default, _aten.clamp.Tensor, _aten._to_copy.default,
    _aten.hardtanh.default, _aten.leaky_relu.default, _aten.erf.default, _aten.sin.default, _aten.cos.default,
    _aten.logical_not.default, _aten.logical_and.default, _aten.logical_or.default, _aten.bitwise_not.default,
    _aten.__and__.Tensor, _aten.__or__.Tensor, _aten.masked_fill.Scalar, _aten.masked_fill.Tensor,
    _aten.floor.default, _aten.ceil.default, _aten.round.default, _aten.sign.default, _aten.hardsigmoid.default,
    _aten.hardswish.default, _aten.elu.default, _aten.softplus.default, _aten.square.default,
}
_REDUCE = {_aten.sum.dim_IntList, _aten.mean.dim, _aten.amax.default, _aten.amin.default}
_SOFTMAX = {_aten.softmax.int, _aten._softmax.default, _aten.log_softmax.int, _aten._log_softmax.default}


# ---------------------------------------------------------------- groupings

def _groups(rank: int, cuts: set[int]) -> list[tuple[int, int]] | None:
    """Axis runs [start, end) of a rank-`rank` tensor split only at `cuts` (p: between axes p - 1 and p)."""
    bounds = [0] + sorted(c for c in cuts if 0 < c < rank) + [rank]
    runs = [(a, b) for a, b in zip(bounds, bounds[1:])]
    return runs if len(runs) <= MAX_RANK else None


def _sizes(dims, runs) -> list[int]:
    return [math.prod(dims[a:b]) for a, b in runs]


def _group_of(runs, axis: int) -> int:
    return next(i for i, (a, b) in enumerate(runs) if a <= axis < b)


def _broadcast_cuts(out, operands) -> set[int]:
    """Where an operand's broadcast pattern changes: it may not merge an axis it broadcasts with one it does not."""
    cuts = set()
    for dims in operands:
        aligned = (1,) * (len(out) - len(dims)) + tuple(dims)
        kind = [None if o == 1 else (d == o) for d, o in zip(aligned, out)]   # None: either way
        last = None
        for p, k in enumerate(kind):
            if k is None:
                continue
            if last is not None and k != last[1]:
                cuts.update(range(last[0] + 1, p + 1))       # anywhere between the two: cut at each place
            last = (p, k)
    return cuts


def _default_cuts(rank: int) -> set[int]:
    """No constraint: merge the leading axes, keep the last three."""
    return {rank - 3, rank - 2, rank - 1}


# ---------------------------------------------------------------- the rule

class _Emit:
    def __init__(self, graph: torch.fx.Graph):
        self.graph = graph

    def view(self, x, dims):
        # reshape, not view: after a permute the elements are not contiguous in torch (the converter's RESHAPE
        # reads the logical order either way)
        return self.graph.call_function(_aten.reshape.default, (x, [int(d) for d in dims]))

    def call(self, target, args, kwargs=None):
        return self.graph.call_function(target, tuple(args), dict(kwargs or {}))


def _tensor_args(n) -> list[torch.fx.Node]:
    return [a for a in n.all_input_nodes if shape(a) is not None]


def _high(n) -> bool:
    dims = shape(n)
    if dims is not None and len(dims) > MAX_RANK:
        return True
    if n.target in (_aten.cat.default, _aten.stack.default):
        return any(len(shape(a) or ()) > MAX_RANK for a in n.args[0])
    if n.target is operator.getitem:
        return False
    return any(len(shape(a) or ()) > MAX_RANK for a in _tensor_args(n))


def _norm(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _elementwise(e: _Emit, n):
    out = shape(n)
    operands = [shape(a) for a in n.args if isinstance(a, torch.fx.Node)]
    if any(d is None for d in operands):
        return None
    cuts = _broadcast_cuts(out, operands)
    if not cuts - {0}:
        cuts = _default_cuts(len(out))
    runs = _groups(len(out), cuts)
    if runs is None:
        return None

    def grouped(a):
        if not isinstance(a, torch.fx.Node):
            return a
        dims = (1,) * (len(out) - len(shape(a))) + shape(a)
        return e.view(a, _sizes(dims, runs))
    y = e.call(n.target, [grouped(a) for a in n.args], n.kwargs)
    return e.view(y, out)


def _along(e: _Emit, n, dim_pos: int, make):
    """An op along one axis (slice, select, index_select, softmax, split): that axis alone, the others merged."""
    x = n.args[0]
    dims = shape(x)
    dim = _norm(n.args[dim_pos] if len(n.args) > dim_pos else n.kwargs.get("dim", 0), len(dims))
    runs = _groups(len(dims), {dim, dim + 1})
    if runs is None:
        return None
    args = list(n.args)
    args[0] = e.view(x, _sizes(dims, runs))
    if len(n.args) > dim_pos:
        args[dim_pos] = _group_of(runs, dim)
    elif "dim" in n.kwargs:                              # the op's result reads its axis from the keyword
        n.kwargs = {**n.kwargs, "dim": _group_of(runs, dim)}
    return make(args, runs, dim)


def _reduce(e: _Emit, n):
    x, dims = n.args[0], shape(n.args[0])
    axes = n.args[1] if len(n.args) > 1 else None
    if axes is None or axes == []:
        return None
    axes = {_norm(a, len(dims)) for a in ([axes] if isinstance(axes, int) else axes)}
    cuts = {p for p in range(1, len(dims)) if (p - 1 in axes) != (p in axes)}
    runs = _groups(len(dims), cuts or _default_cuts(len(dims)))
    if runs is None:
        return None
    reduced = [i for i, (a, b) in enumerate(runs) if a in axes]
    # reduced with keepdim, then viewed to the op's own shape (which drops the axes when it does not keep them)
    y = e.call(n.target, [e.view(x, _sizes(dims, runs)), reduced, True, *n.args[3:]], n.kwargs)
    return e.view(y, shape(n))


def _cat(e: _Emit, n):
    xs, dim = n.args[0], n.args[1] if len(n.args) > 1 else 0
    out = shape(n)
    dim = _norm(dim, len(out))
    stack = n.target is _aten.stack.default
    runs = _groups(len(out), {dim, dim + 1})
    if runs is None or any(shape(x) is None for x in xs):
        return None
    views = []
    for x in xs:
        dims = shape(x)
        if stack:
            dims = dims[:dim] + (1,) + dims[dim:]
        if len(dims) != len(out):
            return None
        views.append(e.view(x, _sizes(dims, runs)))
    return e.view(e.call(_aten.cat.default, [views, _group_of(runs, dim)]), out)


def _pad(e: _Emit, n):
    x, pad = n.args[0], list(n.args[1])
    dims = shape(x)
    padded = {len(dims) - 1 - i // 2 for i, p in enumerate(pad) if p}
    cuts = set()
    for a in padded:
        cuts |= {a, a + 1}
    runs = _groups(len(dims), cuts or _default_cuts(len(dims)))
    if runs is None:
        return None
    new = []
    for a, b in reversed(runs):                              # torch's pad list starts at the last axis
        if a in padded:
            i = 2 * (len(dims) - 1 - a)
            new += pad[i:i + 2]
        else:
            new += [0, 0]
    while new[-2:] == [0, 0]:
        new = new[:-2]
    y = e.call(n.target, [e.view(x, _sizes(dims, runs)), new, *n.args[2:]], n.kwargs)
    return e.view(y, shape(n))


def _expand(e: _Emit, n):
    x, out = n.args[0], shape(n)
    src = (1,) * (len(out) - len(shape(x))) + shape(x)
    cuts = _broadcast_cuts(out, [src]) or _default_cuts(len(out))
    runs = _groups(len(out), cuts)
    if runs is None:
        return None
    y = e.call(n.target, [e.view(x, _sizes(src, runs)), _sizes(out, runs)])
    return e.view(y, out)


def _permute(e: _Emit, n):
    x, dims = n.args[0], shape(n.args[0])
    r = len(dims)
    if n.target is _aten.transpose.int:
        a, b = _norm(n.args[1], r), _norm(n.args[2], r)
        perm = list(range(r))
        perm[a], perm[b] = perm[b], perm[a]
    else:
        perm = [_norm(p, r) for p in n.args[1]]
    # runs of input axes that stay together, in order, in the output
    blocks, start = [], 0
    for i in range(1, r + 1):
        if i == r or perm[i] != perm[i - 1] + 1:
            blocks.append(tuple(perm[start:i]))
            start = i
    order = sorted(blocks)                                   # the blocks in input order
    size = {blk: math.prod(dims[a] for a in blk) for blk in blocks}
    cur = list(order)
    y = x
    for i, want in enumerate(blocks):                        # move each block to its place: one rank-4 permute each
        j = cur.index(want)
        if j == i:
            continue
        a, b, c = cur[:i], cur[i:j], cur[j + 1:]
        four = [math.prod(size[k] for k in a), math.prod(size[k] for k in b), size[want],
                math.prod(size[k] for k in c)]
        y = e.call(_aten.permute.default, [e.view(y, four), [0, 2, 1, 3]])
        cur = a + [want] + b + c
    return e.view(y, shape(n))


def _matmul(e: _Emit, n):
    a, b = n.args[0], n.args[1]
    da, db, out = shape(a), shape(b), shape(n)
    if len(da) < 2 or len(db) < 2:
        return None
    batch = out[:-2]
    ba = (1,) * (len(batch) - len(da[:-2])) + da[:-2]
    bb = (1,) * (len(batch) - len(db[:-2])) + db[:-2]
    cuts = _broadcast_cuts(batch, [ba, bb]) or set()
    runs = _groups(len(batch), cuts)
    if runs is None or len(runs) > 2:
        return None
    y = e.call(_aten.matmul.default, [e.view(a, _sizes(ba, runs) + list(da[-2:])),
                                       e.view(b, _sizes(bb, runs) + list(db[-2:]))])
    return e.view(y, out)


def _linear(e: _Emit, n):
    x, dims = n.args[0], shape(n.args[0])
    y = e.call(n.target, [e.view(x, [math.prod(dims[:-1]), dims[-1]]), *n.args[1:]], n.kwargs)
    return e.view(y, shape(n))


def _layer_norm(e: _Emit, n):
    x, norm = n.args[0], list(n.args[1])
    dims = shape(x)
    k = len(dims) - len(norm)
    rest = list(n.args[2:])
    if len(norm) > 1:
        rest = [e.view(w, [math.prod(norm)]) if isinstance(w, torch.fx.Node) else w for w in rest[:2]] + rest[2:]
    y = e.call(n.target, [e.view(x, [math.prod(dims[:k]), math.prod(norm)]), [math.prod(norm)], *rest], n.kwargs)
    return e.view(y, shape(n))


def _same_rank_along(e, n):
    """select / slice / index_select / softmax: the op on the grouped view, its result viewed to its own shape."""
    return _along(e, n, 1, lambda args, runs, dim: e.view(e.call(n.target, args, n.kwargs), shape(n)))


def _items_viewed_back(e: _Emit, items, parts):
    """Each reader `parts_old[i]` of a tuple op replaced by `parts[i]` viewed to that item's logical shape."""
    for u in items:
        with e.graph.inserting_after(u):
            g = e.call(operator.getitem, [parts, u.args[1]])
        with e.graph.inserting_after(g):
            v = e.view(g, shape(u))
        v.meta = dict(u.meta)
        u.replace_all_uses_with(v)
    return parts


def _split(e: _Emit, n):
    """split / split_with_sizes / unbind: the op along its axis on the grouped view, each item viewed back."""
    items = [u for u in n.users if u.target is operator.getitem]
    if len(items) != len(n.users):
        return None
    dim_pos = 1 if n.target is _aten.unbind.int else 2
    return _along(e, n, dim_pos, lambda args, runs, dim: _items_viewed_back(e, items, e.call(n.target, args,
                                                                                                n.kwargs)))


def _batch_norm(e: _Emit, n):
    """Inference batch norm (a video network's BatchNorm3d): per channel, so the axes after the channel merge;
    its first result is viewed back for each reader (the others, batch statistics, are not read in inference)."""
    items = [u for u in n.users if u.target is operator.getitem]
    if len(items) != len(n.users) or any(u.args[1] != 0 for u in items):
        return None
    x = n.args[0]
    dims = shape(x)
    runs = _groups(len(dims), {1, 2, 3})
    if runs is None:
        return None
    return _items_viewed_back(e, items, e.call(n.target, [e.view(x, _sizes(dims, runs)), *n.args[1:]], n.kwargs))


def _roll(e: _Emit, n):
    """A roll over several axes is one roll per axis (a permutation of the elements: applying it axis by axis is
    the same permutation), each on a view where its axis stands alone."""
    x, shifts = n.args[0], n.args[1]
    axes = n.args[2] if len(n.args) > 2 else n.kwargs.get("dims", [])
    shifts, axes = ([v] if isinstance(v, int) else list(v) for v in (shifts, axes))
    full = shape(n)
    if not axes or len(shifts) != len(axes):
        return None                                      # a roll of the flattened tensor: not an axis op
    y = x
    for step, axis in zip(shifts, axes):
        axis = _norm(axis, len(full))
        runs = _groups(len(full), {axis, axis + 1})
        if runs is None:
            return None
        y = e.view(e.call(_aten.roll.default, [e.view(y, _sizes(full, runs)), [step], [_group_of(runs, axis)]]), full)
    return y


_HANDLERS = {
    **{t: _elementwise for t in _ELEMENTWISE}, **{t: _reduce for t in _REDUCE},
    **{t: _same_rank_along for t in _SOFTMAX},
    _aten.cat.default: _cat, _aten.stack.default: _cat, _aten.constant_pad_nd.default: _pad, _aten.pad.default: _pad,
    _aten.expand.default: _expand, _aten.permute.default: _permute, _aten.transpose.int: _permute,
    _aten.matmul.default: _matmul, _aten.bmm.default: _matmul, _aten.linear.default: _linear,
    _aten.layer_norm.default: _layer_norm, _aten.select.int: _same_rank_along, _aten.slice.Tensor: _same_rank_along,
    _aten.index_select.default: _same_rank_along, _aten.split.Tensor: _split,
    _aten.split_with_sizes.default: _split, _aten.unbind.int: _split, _aten.roll.default: _roll,
    _aten._native_batch_norm_legit_no_training.default: _batch_norm,
}
_TUPLES = (_aten.split.Tensor, _aten.split_with_sizes.default, _aten.unbind.int,
           _aten._native_batch_norm_legit_no_training.default)


def _collapse_views(graph: torch.fx.Graph) -> None:
    """A shape change of a shape change (or of a copy) of x -> one reshape of x: the rank > 4 view between two ops'
    merges disappears (a reshape reads the logical order, so a chain of shape changes is its last one alone)."""
    for n in graph.nodes:
        out = shape(n)
        if out is None and n.op == "call_function" and n.target is _aten.reshape.default:
            out = tuple(n.args[1])                            # one this rule made: its shape is its argument
        if n.op != "call_function" or n.target not in _RESHAPES or out is None:
            continue
        src = n.args[0]
        while isinstance(src, torch.fx.Node) and src.op == "call_function" and src.target in _VIEWS:
            src = src.args[0]
        if src is not n.args[0]:
            n.target, n.args, n.kwargs = _aten.reshape.default, (src, list(out)), {}


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    e = _Emit(graph)
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target in _VIEWS or not n.users or not _high(n):
            continue
        handler = _HANDLERS.get(n.target)
        if handler is None or any(shape(a) is None for a in _tensor_args(n)) or shape(n) is None and \
                n.target not in _TUPLES:
            continue
        with graph.inserting_before(n):
            y = handler(e, n)
        if y is None:
            continue
        if n.target not in _TUPLES:                # a tuple's handler rewires the readers of its items itself
            y.meta = dict(n.meta)            # the view back has the op's shape: the next op reads it
            n.replace_all_uses_with(y)
        done += 1
    _collapse_views(graph)
    graph.eliminate_dead_code()
    return [f"ops on rank > 4 values -> on merged views at rank <= 4 x{done} (bit-exact)"] * bool(done), []
