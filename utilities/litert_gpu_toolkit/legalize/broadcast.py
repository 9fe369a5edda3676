"""Rule: an expand of a runtime tensor (BROADCAST_TO, which the GPU refuses) becomes concatenations of the tensor
with itself -- a copy of the same elements: bit-exact. (A float elementwise op that broadcasts, one side or both,
is left alone: the converter gives it no BROADCAST_TO and the GPU takes it; the bool masks that do need one are
the boolean rule's.)

Each axis the expand grows from 1 to n is repeated by doubling: cat(y, y) until at least half, then cat(y, the
first n - size rows of y): about 2 * log2(n) CONCATENATION / SLICE ops for n copies, never n inputs to one op.
A rank grown by the expand (new leading axes) is first added with a reshape (the same element order). An expand
whose output is of rank > 4 is left to the rank rule and named.

"""
from __future__ import annotations

import torch

from .nodes import shape, source_line
from .repeat import expand_by_concat

_aten = torch.ops.aten


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    return _expands(gm)


def _expands(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done, left = 0, []
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not _aten.expand.default or not n.users:
            continue
        src, out = shape(n.args[0]), shape(n)
        if src is None or out is None:
            continue
        if len(out) > 4:
            left.append(f"expand to rank {len(out)} {list(out)} ({source_line(n) or 'no source'})")
            continue
        with graph.inserting_before(n):
            y = expand_by_concat(graph, n.args[0], src, out)
        n.replace_all_uses_with(y)
        done += 1
    return ([f"expand of a runtime tensor -> concatenations x{done} (bit-exact)"] if done else []), left
