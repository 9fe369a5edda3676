"""Rule: an assignment through a bool mask (`x[mask] = v`, `index_put_((mask,), v)`) becomes a `where`.

`x[mask] = v` exports as `index_put(x, [mask], v)`; the converter cannot lower a bool index (its shape depends on
the data: "boolean indices must be concrete"). When the mask covers the leading axes of `x` (its shape is
x.shape[:k]) and `v` broadcasts over the rest (a scalar, or a tensor matching x's last axes), the assignment is
`where(mask viewed with trailing 1s, v, x)`: every element the mask selects takes v's value, the others keep x's.
Exact by construction (a selection, no arithmetic). The `boolean` rule, which runs next, turns that `where` into
the float arithmetic the GPU runs. An accumulating index_put, several indices, or a value that does not broadcast
that way is left as it was.
"""
from __future__ import annotations

import torch

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


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done, left = 0, []
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _INDEX_PUT or not n.users:
            continue
        x, indices, values = n.args[:3]
        accumulate = n.args[3] if len(n.args) > 3 else n.kwargs.get("accumulate", False)
        if (len(indices) != 1 or not isinstance(indices[0], torch.fx.Node) or _dtype(indices[0]) is not torch.bool
                or accumulate):
            continue
        mask, xs, ms = indices[0], shape(x), shape(indices[0])
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
    return [f"masked assignment -> where x{done} (exact)"] * bool(done), left
