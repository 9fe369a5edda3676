"""Rule: an assignment through a bool mask (`x[mask] = v`, `index_put_((mask,), v)`) becomes a `where`.

`x[mask] = v` exports as `index_put(x, [mask], v)`; the converter cannot lower a bool index (its shape depends on
the data: "boolean indices must be concrete"). When the mask covers the leading axes of `x` (its shape is
x.shape[:k]) and `v` broadcasts over the rest (a scalar, or a tensor matching x's last axes), the assignment is
`where(mask viewed with trailing 1s, v, x)`: every element the mask selects takes v's value, the others keep x's.
Exact by construction (a selection, no arithmetic). The `boolean` rule, which runs next, turns that `where` into
the float arithmetic the GPU runs. An accumulating index_put, several indices, or a value that does not broadcast
that way is left as it was.

An assignment at integer positions known at export (`x[idx] = v`, `x[i0, i1] = v` with constant indices on the
leading axes, no position twice: what a bool mask specialised to the example's positions becomes) is the same
`where`, its value first spread to x's shape -- row p of the spread value is the row of v written to position p
(slices and a concatenation, at most `gather.MAX_RUNS` runs); when the positions cover every row of x in order,
x is v itself. Bit-exact (copies).
"""
from __future__ import annotations

import math

import torch

from .gather import MAX_RUNS, constant_value, flat_index, rows, runs_of
from .nodes import dtype as _dtype, shape, source_line

_aten = torch.ops.aten
_INDEX_PUT = {_aten.index_put.default}      # export's functional form of x[mask] = v and index_put_


def _trailing(values, x_shape: tuple[int, ...], k: int) -> bool:
    """Does `values` (a node) broadcast over x's axes k.. as one value per masked position?"""
    v = shape(values)
    if v is None:
        return False
    v = tuple(v)
    while v and v[0] == 1 and len(v) > len(x_shape) - k:
        v = v[1:]
    rest = x_shape[k:]
    return len(v) <= len(rest) and all(a in (1, b) for a, b in zip(v[::-1], rest[::-1]))


def _constant_positions(gm, indices) -> list[torch.Tensor] | None:
    """The integer index tensors of an index_put when every one is a constant, else None."""
    out = [constant_value(gm, i) for i in indices]
    if any(v is None or v.dtype.is_floating_point or v.dtype is torch.bool for v in out):
        return None
    return out


def _at_positions(gm, n, idx: list[torch.Tensor]):
    """`index_put(x, idx, v)` at constant positions as a where (module docstring); None where it does not apply."""
    graph = gm.graph
    x, _, values = n.args[:3]
    xs, vs, k = shape(n), shape(values), len(idx)         # x's shape (x may be a node a rule just made)
    flat = flat_index(idx, xs)
    rest, rows_of_x = list(xs[k:]), math.prod(xs[:k])
    if not isinstance(values, torch.fx.Node) or vs is None or math.prod(vs) != flat.numel() * math.prod(rest) \
            or list(vs[len(vs) - len(rest):] if rest else []) != rest or len(set(flat.tolist())) != flat.numel():
        return None
    source = {int(p): r for r, p in enumerate(flat.tolist())}
    spread = runs_of([source.get(p, 0) for p in range(rows_of_x)])
    if len(spread) > MAX_RUNS:
        return None
    vals = values if _dtype(values) == _dtype(x) else graph.call_function(
        _aten._to_copy.default, (values,), {"dtype": _dtype(x)})
    full = graph.call_function(_aten.reshape.default, (
        rows(graph, graph.call_function(_aten.reshape.default, (vals, [flat.numel(), *rest])), 0, spread), list(xs)))
    if len(source) == rows_of_x:                        # every row written: x is the value itself
        return full
    mask = torch.zeros(rows_of_x, dtype=torch.bool)
    mask[flat] = True
    name = f"_legal_put_mask_{sum(1 for k, _ in gm.named_buffers() if k.startswith('_legal_put_mask_'))}"
    gm.register_buffer(name, mask.reshape(*xs[:k], *([1] * len(rest))), persistent=False)
    return graph.call_function(_aten.where.self, (graph.get_attr(name), full, x))


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done, placed, left = 0, 0, []
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _INDEX_PUT or not n.users:
            continue
        x, indices, values = n.args[:3]
        accumulate = n.args[3] if len(n.args) > 3 else n.kwargs.get("accumulate", False)
        idx = _constant_positions(gm, indices) if not accumulate and shape(n) is not None else None
        if idx:
            with graph.inserting_before(n):
                out = _at_positions(gm, n, idx)
            if out is not None:
                out.meta["stack_trace"] = n.meta.get("stack_trace")
                n.replace_all_uses_with(out)
                graph.erase_node(n)
                placed += 1
                continue
        if (len(indices) != 1 or not isinstance(indices[0], torch.fx.Node) or _dtype(indices[0]) is not torch.bool
                or accumulate):
            continue
        mask, xs, ms = indices[0], shape(n), shape(indices[0])
        if xs is None or ms is None or tuple(xs[:len(ms)]) != tuple(ms) or not isinstance(values, torch.fx.Node) \
                or not _trailing(values, tuple(xs), len(ms)):
            left.append(f"masked assignment of mask {list(ms or ())} into {list(xs or ())} "
                        f"({source_line(n) or 'no source'})")
            continue
        with graph.inserting_before(n):
            cond = mask if len(ms) == len(xs) else graph.call_function(
                _aten.view.default, (mask, [*ms, *([1] * (len(xs) - len(ms)))]))
            vals = values if _dtype(values) == _dtype(x) else graph.call_function(
                _aten._to_copy.default, (values,), {"dtype": _dtype(x)})
            where = graph.call_function(_aten.where.self, (cond, vals, x))
        where.meta["stack_trace"] = n.meta.get("stack_trace")
        n.replace_all_uses_with(where)
        graph.erase_node(n)
        done += 1
    return ([f"masked assignment -> where x{done} (exact)"] * bool(done)
            + [f"assignment at constant positions -> where x{placed} (bit-exact)"] * bool(placed)), left
