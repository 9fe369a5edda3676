"""Rule: a float division rounded toward minus infinity (`torch.div(a, b, rounding_mode="floor")`, `a // b`) becomes
floor(a / b) with one correction step.

litert-torch lowers it through `mhlo.round_nearest_afz`, which it cannot legalize (CONVERT_FAIL: SigLIP 2's NaFlex
position embeddings split each patch index into a row and a column by a floor division by the grid width). Here
q = floor(a / b), then q + 1 where the remainder a - q * b has reached |b| on b's side and q - 1 where it has the
other sign (a / b rounded across an integer). Bound: equal to torch's for integer-valued operands while |a| and
|q * b| stay below 2**24 (the remainder is then exact; indices and sizes); for other floats, floor(a / b) corrected
once -- the driver checks the result against the module.
"""
from __future__ import annotations

import torch

from .nodes import dtype

_aten = torch.ops.aten
_MODES = {_aten.div.Tensor_mode, _aten.div.Scalar_mode}


def _floor_div(graph, a, b):
    call = graph.call_function
    q = call(_aten.floor.default, (call(_aten.div.Tensor, (a, b)),))
    r = call(_aten.sub.Tensor, (a, call(_aten.mul.Tensor, (q, b))))
    s = call(_aten.sign.default, (b,)) if isinstance(b, torch.fx.Node) else (1.0 if b > 0 else -1.0)
    rs = call(_aten.mul.Tensor, (r, s))                               # the remainder on b's side is >= 0
    size = call(_aten.abs.default, (b,)) if isinstance(b, torch.fx.Node) else abs(float(b))
    up = call(_aten._to_copy.default, (call(_aten.ge.Tensor if isinstance(size, torch.fx.Node) else _aten.ge.Scalar,
                                            (rs, size)),), {"dtype": torch.float32})
    down = call(_aten._to_copy.default, (call(_aten.lt.Scalar, (rs, 0.0)),), {"dtype": torch.float32})
    return call(_aten.sub.Tensor, (call(_aten.add.Tensor, (q, up)), down))


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or not n.users or dtype(n) is not torch.float32:
            continue
        if n.target in _MODES and n.kwargs.get("rounding_mode") == "floor":
            a, b = n.args[:2]
        elif n.target is _aten.floor_divide.default:
            a, b = n.args[:2]
        else:
            continue
        if not isinstance(a, torch.fx.Node) or (isinstance(b, torch.fx.Node) and dtype(b) is not torch.float32):
            continue
        if not isinstance(b, (torch.fx.Node, int, float)) or (not isinstance(b, torch.fx.Node) and b == 0):
            continue
        with graph.inserting_before(n):
            y = _floor_div(graph, a, b)
        n.replace_all_uses_with(y)
        done += 1
    return [f"float floor division -> floor(a / b) with one correction x{done} (exact for integers < 2**24)"
            ] * bool(done), []
