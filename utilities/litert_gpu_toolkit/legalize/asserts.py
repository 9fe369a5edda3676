"""Rule: a runtime check on the data (`torch._check`, `torch._assert_async`, transformers' `torch_compilable_check`)
is dropped.

A LiteRT graph cannot raise, and litert-torch has no lowering for the check or for what computes its condition
(CONVERT_FAIL: "no lowering for aten._is_all_true.default", SigLIP 2's check that its patch grid is positive;
"aten._assert_async.msg"). The check returns nothing the model reads, so its outputs are unchanged: bit-exact. The
condition's ops go with it when nothing else reads them. What the check guarded (a size, a range) is still the
caller's to keep: the report names each dropped check's source line.
"""
from __future__ import annotations

import torch

from .nodes import source_line

_aten = torch.ops.aten
_CHECKS = {_aten._assert_async.default, _aten._assert_async.msg, _aten._assert_scalar.default,
           _aten._functional_assert_async.msg}


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    where = []
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target in _CHECKS and not n.users:
            where.append(source_line(n) or "no source")
            graph.erase_node(n)
    if where:
        graph.eliminate_dead_code()
    return [f"runtime checks on the data dropped x{len(where)} (bit-exact; at {', '.join(dict.fromkeys(where))})"
            ] * bool(where), []
