"""Rule: an adaptive average pool whose output size does not divide its input (PSPNet / UperNet pyramid pooling:
16 -> 3, 16 -> 6) becomes one mean per output cell along each such axis, and one concatenation.

The converter lowers such a pool through rank-5 and rank-6 sums and a BROADCAST_TO (measured: UperNet's pyramid
pooling, "Tensor dimensions must be less than 5" on 19 ADDs). Cell i of an axis of size n pooled to m covers
[floor(i n / m), ceil((i + 1) n / m)), as torch defines it; the pool is separable (the mean over a rectangle is
the mean over its rows of the means over its columns), so each non-dividing axis is done on its own and what is
left is an ordinary pool (or none). Equal to fp32 rounding (the same sums, in another order).
"""
from __future__ import annotations

import math

import torch

from .nodes import calls, shape

_aten = torch.ops.aten


def _cells(graph, x, axis: int, n: int, m: int):
    parts = []
    for i in range(m):
        a, b = (i * n) // m, math.ceil((i + 1) * n / m)
        part = graph.call_function(_aten.slice.Tensor, (x, axis, a, b))
        parts.append(graph.call_function(_aten.mean.dim, (part, [axis], True)))
    return graph.call_function(_aten.cat.default, (parts, axis))


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done = 0
    for n in calls(graph, _aten.adaptive_avg_pool2d.default):
        dims, out = shape(n.args[0]), list(n.args[1])
        if dims is None or len(dims) not in (3, 4):
            continue
        rank = len(dims)
        uneven = [(rank - 2 + k, dims[rank - 2 + k], out[k]) for k in range(2) if dims[rank - 2 + k] % out[k]]
        if not uneven:
            continue
        y = n.args[0]
        with graph.inserting_before(n):
            for axis, size, cells in uneven:
                y = _cells(graph, y, axis, size, cells)
            if len(uneven) < 2:                              # the other axis divides: an ordinary pool
                y = graph.call_function(_aten.adaptive_avg_pool2d.default, (y, out))
        n.replace_all_uses_with(y)
        done += 1
    return [f"adaptive average pool with uneven cells -> means of slices x{done} (fp32 rounding)"] * bool(done), []
