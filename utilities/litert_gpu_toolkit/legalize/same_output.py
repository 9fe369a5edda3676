"""Rule: a value returned in two output slots gets a tensor of its own in every slot after the first.

A graph that returns one tensor twice -- `return y, y`, or `y` beside a pooling, reshape or copy that is the
identity at y's shape (Hugging Face's TextNet returns its last stage and an adaptive pool of it to the same 2 x 2,
which the converter drops) -- becomes a .tflite whose two outputs name one tensor. Compiled for the GPU it runs at
full residency and both outputs come back all zero (measured: a conv's result returned twice, and beside an
identity adaptive pool; llvmpipe, ai-edge-litert 2.3.0). Returning `-(-y)` in the later slots gives each its own
tensor. Negation is exact, so the rule is bit-exact; it costs two elementwise ops per extra slot.

"The same value" is followed through ops that are identities at the shapes the graph has (views and reshapes to
the same shape, copies, an adaptive average pool to the input's own size); two different computations that happen
to be equal are not merged by the converter and are left alone.
"""
from __future__ import annotations

import torch

from .nodes import dtype, negated_twice, shape, source_line

_aten = torch.ops.aten
_IDENTITY = {_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default, _aten.alias.default,
             _aten.clone.default, _aten.contiguous.default, _aten.detach.default, _aten._to_copy.default,
             _aten.expand.default, _aten.adaptive_avg_pool2d.default, _aten._adaptive_avg_pool2d.default,
             _aten.adaptive_avg_pool1d.default, _aten.flatten.using_ints, _aten.squeeze.dim, _aten.unsqueeze.default}


def _root(node):
    """The value `node` copies, followed through ops that are identities at these shapes."""
    while (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _IDENTITY
           and isinstance(node.args[0], torch.fx.Node) and shape(node) is not None
           and shape(node) == shape(node.args[0]) and dtype(node) == dtype(node.args[0])):
        node = node.args[0]
    return node


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    seen, made = set(), []

    def own(value: torch.fx.Node):
        root = _root(value)
        if root not in seen:
            seen.add(root)
            return value
        made.append(value)
        return negated_twice(graph, value, output)

    output.args = torch.fx.node.map_arg(output.args, own)
    where = ", ".join(dict.fromkeys(filter(None, (source_line(v) for v in made))))
    return [f"a value returned in two output slots -> -(-y) in the later slot x{len(made)} (bit-exact)"
            f"{f' at {where}' if where else ''}"] * bool(made), []
