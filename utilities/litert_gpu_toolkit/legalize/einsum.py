"""Rule: a two-operand einsum over a value of rank > 4, or with batch indices and one constant operand, becomes
permutes, reshapes and one rank-3 batched matmul.

The converter lowers such an einsum with rank-5 RESHAPE / TRANSPOSE and a BATCH_MATMUL the GPU rejects (measured:
timm's MViTv2, whose decomposed relative positions are `einsum("byhwc,hkc->byhwk", q, Rh)`: "Tensor dimensions
must be less than 5" and "Not supported batched mat mul case"). Every index of such an equation is a batch index
(in both operands and the output), a contracted one (in both operands only) or a free one (in one operand and the
output), so the einsum is a batched matmul: each operand permuted to [batch, free, contracted] (the right one to
[batch, contracted, free]) and merged to rank 3, one matmul, then the result split and permuted to the output's
order. This rule runs before `rank`, which carries the permutes and reshapes it leaves at rank > 4 at rank <= 4.
An einsum with batch indices (in both operands and the output) and exactly one constant operand is written the
same way with the runtime operand on the left: the converter's own lowering may put the constant on the left of
its BATCH_MATMUL, which the GPU refuses (measured: Funnel's `einsum("binh,tnh->bnit", q, pos)`, a [4, 32, 16]
constant @ a runtime [4, 16, 32]). Equal to fp32 rounding (the same products, summed in the matmul's order).
Not handled, and left as they were: an ellipsis, a repeated index (a trace or diagonal), an index summed out of
one operand alone, more than two operands.
"""
from __future__ import annotations

import math

import torch

from .constants import constant_nodes
from .nodes import calls, shape, source_line

_aten = torch.ops.aten


def _parse(equation: str) -> tuple[str, str, str] | None:
    eq = equation.replace(" ", "")
    if "..." in eq or eq.count("->") != 1:
        return None
    lhs, out = eq.split("->")
    ins = lhs.split(",")
    if len(ins) != 2:
        return None
    a, b = ins
    if any(len(set(s)) != len(s) for s in (a, b, out)) or not set(out) <= set(a) | set(b):
        return None
    if (set(a) - set(b) - set(out)) or (set(b) - set(a) - set(out)):
        return None
    return a, b, out


def _permute(graph, x, order: list[int]):
    return x if order == sorted(order) else graph.call_function(_aten.permute.default, (x, order))


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    const = constant_nodes(graph)
    done = []
    for n in calls(graph, _aten.einsum.default):
        equation, operands = n.args[0], list(n.args[1])
        parsed = _parse(equation) if len(operands) == 2 else None
        if parsed is None:
            continue
        dims = [shape(operands[0]), shape(operands[1]), shape(n)]
        if any(d is None for d in dims):
            continue
        a, b, out = parsed
        one_constant = (operands[0] in const) != (operands[1] in const)
        if max(len(d) for d in dims) <= 4 and not (one_constant and set(a) & set(b) & set(out)):
            continue
        if operands[0] in const and one_constant:         # the runtime operand on the left: the GPU's form
            a, b, operands, dims = b, a, operands[::-1], [dims[1], dims[0], dims[2]]
        size = {**dict(zip(a, dims[0])), **dict(zip(b, dims[1]))}
        batch = [c for c in a if c in b and c in out]
        summed = [c for c in a if c in b and c not in out]
        free_a, free_b = [c for c in a if c not in b], [c for c in b if c not in a]

        def merged(idx):
            return math.prod(size[c] for c in idx)

        with graph.inserting_before(n):
            left = _permute(graph, operands[0], [a.index(c) for c in batch + free_a + summed])
            left = graph.call_function(_aten.reshape.default, (left, [merged(batch), merged(free_a), merged(summed)]))
            right = _permute(graph, operands[1], [b.index(c) for c in batch + summed + free_b])
            right = graph.call_function(_aten.reshape.default, (right, [merged(batch), merged(summed),
                                                                         merged(free_b)]))
            y = graph.call_function(_aten.bmm.default, (left, right))
            order = batch + free_a + free_b
            y = graph.call_function(_aten.reshape.default, (y, [size[c] for c in order]))
            y = _permute(graph, y, [order.index(c) for c in out])
        y.meta["stack_trace"] = n.meta.get("stack_trace")
        n.replace_all_uses_with(y)
        done.append(f"{equation}{f' at {source_line(n)}' if source_line(n) else ''}")
    return [f"einsum -> permutes, reshapes and a rank-3 batched matmul x{len(done)} (fp32 rounding): "
            f"{'; '.join(dict.fromkeys(done))}"] * bool(done), []
