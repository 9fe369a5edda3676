"""Rule: a matrix product whose left operand is a constant and whose right one is not runs as its transpose.

The GPU takes a constant only as the right operand of BATCH_MATMUL ("Not supported batched mat mul case:
non-constant tensor" otherwise; measured on the software GPU: constant [2, 16, 16] @ runtime [2, 16, 32] is
rejected, runtime @ constant of either rank runs). Constants on the left come from the model (a learned query, a
table in an einsum torch orders constant-first) and from rewrites and folds (a one-hot gather is one-hot @ x).
C @ X is written (X^T @ C^T)^T: the constant transposed once at export (the converter folds it), the runtime
operand transposed on its last two axes. The same dot products of the same vectors: equal to fp32 rounding (the
kernel may sum in another order).
"""
from __future__ import annotations

import torch

from .constants import constant_nodes
from .nodes import shape

_aten = torch.ops.aten
_MATMUL = {_aten.matmul.default, _aten.bmm.default, _aten.mm.default}


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    const = constant_nodes(graph)
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _MATMUL or n in const or not n.users:
            continue
        a, b = n.args[:2]
        if a not in const or b in const or len(shape(a) or ()) < 2 or len(shape(b) or ()) < 2:
            continue
        call = graph.call_function
        with graph.inserting_before(n):
            bt = call(_aten.transpose.int, (b, -1, -2))
            at = call(_aten.transpose.int, (a, -1, -2))
            out = call(_aten.transpose.int, (call(n.target, (bt, at)), -1, -2))
        n.replace_all_uses_with(out)
        done += 1
    return [f"matmul with a constant left operand -> transposed x{done} (fp32 rounding)"] * bool(done), []
