"""Rule: a running sum (`torch.cumsum`) becomes a product with a constant triangular matrix of ones.

The GPU has no CUMSUM kernel, and Hugging Face's RoBERTa family builds its position ids with one at run time
(`create_position_ids_from_input_ids`: cumsum(ids != pad) * mask + pad). Along an axis of length n,
cumsum(x)[..., j] = sum over i <= j of x[..., i] = (x @ U)[..., j] with U[i, j] = 1 for i <= j: the axis is moved
last, the values taken to float32, one matmul with the constant U on the right (the side the GPU takes a constant
on), the result cast to cumsum's dtype and moved back. Integer inputs are exact while every partial sum stays
below 2^24 in magnitude (token counts always do); float inputs equal to fp32 rounding (another summation order).
An axis longer than MAX_LEN is left as it was (U would be n^2 constants) and named.
"""
from __future__ import annotations

import torch

from .nodes import calls, dtype, shape, source_line

_aten = torch.ops.aten
MAX_LEN = 2048


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done, left = 0, []
    for n in calls(graph, _aten.cumsum.default):
        x, dim = n.args[:2]
        dims, out_dtype = shape(x), dtype(n)
        if dims is None or out_dtype is None or not dims:
            continue
        d = dim % len(dims)
        size = dims[d]
        if size > MAX_LEN:
            left.append(f"cumsum over {size} entries ({source_line(n) or 'no source'})")
            continue
        name = f"_legal_cumsum_{n.name}"
        gm.register_buffer(name, torch.triu(torch.ones(size, size)), persistent=False)
        call = graph.call_function
        last = d == len(dims) - 1
        with graph.inserting_before(n):
            y = x if last else call(_aten.transpose.int, (x, d, -1))
            y = call(_aten._to_copy.default, (y,), {"dtype": torch.float32})
            y = call(_aten.matmul.default, (y, graph.get_attr(name)))
            y = call(_aten._to_copy.default, (y,), {"dtype": out_dtype})
            y = y if last else call(_aten.transpose.int, (y, d, -1))
        y.meta = dict(n.meta)
        n.replace_all_uses_with(y)
        done += 1
    return [f"cumsum -> matmul with a constant triangular matrix x{done} (exact for integer sums below 2^24; "
            "floats: fp32 rounding)"] * bool(done), left
