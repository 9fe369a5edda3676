"""Rule: arithmetic the model does in float64 is done in float32; within fp32 rounding of each op.

LiteRT has no float64 kernels: litert-torch fails on them ("failed to legalize operation 'tfl.cos'": Flux's rotary
table is built in float64 from the runtime position ids, then cast to float32). Every float64 the graph makes --
a cast to it, a factory (`arange`, `ones`, ...) asked for it, a float64 buffer or folded constant -- is made in
float32 instead, and the ops that read them follow. Bound: each op rounds to fp32 where torch rounded to fp64,
and the value is rounded to fp32 at its final cast either way; the driver checks the result against the module
at 1e-5 of each output's magnitude (Flux's rotary angles reach ~1e2 rad: a cos / sin error of ~1e-5 at most). A
float64 graph input is left as it was and named.
"""
from __future__ import annotations

import torch

from .nodes import attr_value, dtype, source_line

_aten = torch.ops.aten


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done, left = 0, []
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is _aten._assert_tensor_metadata.default and \
                torch.float64 in (*n.args, *n.kwargs.values()):
            graph.erase_node(n)          # export's check that a value is float64: no longer true, nothing reads it
        elif n.op == "placeholder" and dtype(n) is torch.float64:
            left.append(f"float64 input {n.target} (no float64 kernels in LiteRT)")
        elif n.op == "get_attr" and dtype(n) is torch.float64:
            value = attr_value(gm, n.target)
            name = "_legal_f32_" + n.target.replace(".", "_")
            gm.register_buffer(name, value.detach().to(torch.float32), persistent=False)
            n.target = name
            done += 1
        elif n.op == "call_function" and n.kwargs.get("dtype") is torch.float64:
            n.kwargs = {**n.kwargs, "dtype": torch.float32}
            done += 1
        elif n.op == "call_function" and n.target is _aten._to_copy.default and dtype(n) is torch.float64:
            left.append(f"float64 value from {n.target} ({source_line(n) or 'no source'})")
    return [f"float64 arithmetic -> float32 x{done} (fp32 rounding per op)"] * bool(done), left
