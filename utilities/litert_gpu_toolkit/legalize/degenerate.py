"""Rule: a softmax over an axis of size 1 is x * 0 + 1 (log_softmax: x * 0).

The converter lowers it to exp(x - max) / sum with the sum equal to the exp, and ends with DIV(t, t), which the
GPU rejects ("No support of few identical inputs in the same operation"; SwiftFormer's additive attention takes a
softmax of a [B, N, 1] score over its last axis). The softmax of one element is exactly 1 for a finite input; x * 0
keeps the dependence on x, so an inf or NaN still gives NaN, as torch's does. Bit-exact.
"""
from __future__ import annotations

import torch

from .nodes import shape

_aten = torch.ops.aten
_SOFTMAX = {_aten.softmax.int: 1.0, _aten._softmax.default: 1.0, _aten.log_softmax.int: 0.0,
            _aten._log_softmax.default: 0.0}


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _SOFTMAX or not n.users:
            continue
        dims = shape(n.args[0])
        if dims is None or dims[n.args[1] % len(dims)] != 1:
            continue
        with graph.inserting_before(n):
            y = graph.call_function(_aten.mul.Tensor, (n.args[0], 0.0))
            if _SOFTMAX[n.target]:
                y = graph.call_function(_aten.add.Tensor, (y, _SOFTMAX[n.target]))
        n.replace_all_uses_with(y)
        done += 1
    return [f"softmax over an axis of size 1 -> x * 0 + 1 x{done} (bit-exact)"] * bool(done), []
