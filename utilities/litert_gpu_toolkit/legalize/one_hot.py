"""Rule: a one-hot of a runtime integer tensor is relu(1 - |x[..., None] - arange(n)|), computed in float32.

litert-torch lowers `aten.one_hot` with a range check (`_assert_async`) it has no lowering for: CONVERT_FAIL
(XLNet's segment matrix, `F.one_hot((a != b).long(), 2)`); `x[..., None] == arange(n)` would be fused back into a
ONE_HOT, which the GPU refuses. For an integer i and a class c, 1 - |i - c| is 1 where they are equal and <= 0
elsewhere, so the relu is the one-hot exactly while i is below 2**24 in magnitude (float32 holds it); the result is
cast back to the one-hot's integer dtype. torch raises for an index outside [0, n); this gives a row of zeros.
A one-hot of a constant is the constants rule's (folded at export).
"""
from __future__ import annotations

import torch

from .nodes import calls, dtype, shape

_aten = torch.ops.aten


def float_one_hot(gm: torch.fx.GraphModule, index: torch.fx.Node, classes: int) -> torch.fx.Node:
    """relu(1 - |index[..., None] - arange(classes)|) in float32, inserted at the graph's insertion point: the one-hot
    of a runtime integer index (also the gather rule's per-row picks)."""
    graph, call = gm.graph, gm.graph.call_function
    name = f"_legal_classes_{classes}"
    if not hasattr(gm, name):
        gm.register_buffer(name, torch.arange(classes, dtype=torch.float32), persistent=False)
    at = call(_aten.unsqueeze.default, (call(_aten._to_copy.default, (index,), {"dtype": torch.float32}), -1))
    distance = call(_aten.abs.default, (call(_aten.sub.Tensor, (at, graph.get_attr(name))),))
    return call(_aten.relu.default, (call(_aten.rsub.Scalar, (distance, 1.0)),))


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done = 0
    for n in calls(graph, _aten.one_hot.default):
        x = n.args[0]
        classes = int(n.args[1] if len(n.args) > 1 else n.kwargs.get("num_classes", -1))
        if classes <= 0 or shape(x) is None or dtype(n) is None:
            continue                                     # n inferred from the data: export has no size for it
        with graph.inserting_before(n):
            y = graph.call_function(_aten._to_copy.default, (float_one_hot(gm, x, classes),), {"dtype": dtype(n)})
        n.replace_all_uses_with(y)
        done += 1
    return [f"one_hot of a runtime index -> relu(1 - |x - arange|) x{done} (exact below 2**24)"] * bool(done), []
