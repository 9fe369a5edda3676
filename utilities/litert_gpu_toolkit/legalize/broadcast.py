"""Rule: an expand of a runtime tensor (BROADCAST_TO, which the GPU refuses) becomes concatenations of the tensor
with itself -- a copy of the same elements: bit-exact. (A float elementwise op that broadcasts, one side or both,
is left alone: the converter gives it no BROADCAST_TO and the GPU takes it; the bool masks that do need one are
the boolean rule's.)

Each axis the expand grows from 1 to n is repeated by doubling: cat(y, y) until at least half, then cat(y, the
first n - size rows of y): about 2 * log2(n) CONCATENATION / SLICE ops for n copies, never n inputs to one op.
A rank grown by the expand (new leading axes) is first added with a reshape (the same element order). An expand
whose output is of rank > 4 is left to the rank rule and named. An expand read only by float elementwise ops whose
other operand has the full shape is left as it is: the converter folds it into the op's broadcast (no
BROADCAST_TO; measured: F.normalize's expand_as, 8/8 ops GPU-only plain, 3 CONCATENATIONs more with this rule).

"""
from __future__ import annotations

import torch

from .nodes import shape, source_line
from .repeat import expand_by_concat

_aten = torch.ops.aten


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    return _expands(gm)


_BROADCASTING = {_aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor, _aten.maximum.default,
                 _aten.minimum.default}


def _absorbed(n: torch.fx.Node) -> bool:
    """Every reader is a float elementwise op whose other operand already has the result's shape: the converter
    folds such an expand into the op's own broadcast (F.normalize's `x / norm.expand_as(x)`), no BROADCAST_TO."""
    out = shape(n)
    for u in n.users:
        if u.op != "call_function" or u.target not in _BROADCASTING or len(u.args) != 2:
            return False
        other = u.args[1] if u.args[0] is n else u.args[0]
        if not isinstance(other, torch.fx.Node) or shape(other) != out or shape(u) != out:
            return False
        v = u.meta.get("val")
        if not isinstance(v, torch.Tensor) or not v.dtype.is_floating_point:
            return False
    return True


def _expands(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done, left = 0, []
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not _aten.expand.default or not n.users or _absorbed(n):
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
