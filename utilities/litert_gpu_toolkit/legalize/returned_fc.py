"""Rule: a FULLY_CONNECTED result that is a graph output *and* feeds an ADD / SUB / MUL / DIV by a constant is
returned through a double negation.

The GPU folds an elementwise op with a constant operand into the FULLY_CONNECTED before it (the constant joins
its bias or its weights); when the FULLY_CONNECTED's own result is also an output of the graph, that output
comes back wrong: `y = fc(x); return y, y * 2.0` (or `y + 1.0`, `y + bias_vector`) gives output 0 at corr -0.13
to 0.61 against LiteRT's CPU at full residency, fp16 and fp32 alike (llvmpipe, ai-edge-litert 2.3.0; a
convolution's result, a runtime operand (`y * y`) or a unary consumer (`tanh(y)`) is right). A model returning
hidden states beside logits computed from them has this shape. Returning `-(-y)` gives the output its own
tensor, which the fusion leaves alone (measured: both outputs corr 1.0). Negation is exact, so the rule is
bit-exact; it costs two elementwise ops on that output.
"""
from __future__ import annotations

import torch

from .nodes import negated_twice, source_line

_aten = torch.ops.aten
_FC = {_aten.linear.default, _aten.addmm.default, _aten.mm.default}
_FOLDED = {_aten.add.Tensor, _aten.add.Scalar, _aten.sub.Tensor, _aten.sub.Scalar, _aten.mul.Tensor,
           _aten.mul.Scalar, _aten.div.Tensor, _aten.div.Scalar}


def _constant(arg) -> bool:
    return not isinstance(arg, torch.fx.Node) or arg.op == "get_attr"


def _folded_into(node: torch.fx.Node) -> bool:
    """Does `node` feed an elementwise op whose other operand is a constant (what the GPU folds into it)?"""
    for user in node.users:
        if user.op == "call_function" and user.target in _FOLDED:
            others = [a for a in user.args[:2] if a is not node]
            if others and all(_constant(a) for a in others):
                return True
    return False


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    guarded: dict[torch.fx.Node, torch.fx.Node] = {}
    for value in list(output.all_input_nodes):
        if value.op != "call_function" or value.target not in _FC or not _folded_into(value):
            continue
        guarded[value] = negated_twice(graph, value, output)
    if guarded:
        output.args = torch.fx.node.map_arg(output.args, lambda n: guarded.get(n, n))
    where = ", ".join(filter(None, (source_line(v) for v in guarded)))
    return [f"returned FULLY_CONNECTED result fed to a constant-operand op -> -(-y) x{len(guarded)} "
            f"(bit-exact){f' at {where}' if where else ''}"] * bool(guarded), []
