"""Rule: a group norm is written out as a mean and a variance over a [N, G, rest] view; exact to fp32 rounding.

litert-torch lowers `aten.group_norm` with a BROADCAST_TO of each group's statistics to its channels (measured: the
diffusers UNet2D, 42 BROADCAST_TOs, 46 of 589 ops on the GPU). Written out, every broadcast is one an elementwise
op takes itself ([N, G, 1] against [N, G, rest]; the converter emits no BROADCAST_TO for those), and the per
channel affine reads a [C, 1, ...] constant. The statistics are the biased mean and variance torch uses, summed in
another order: equal to fp32 rounding. Any input rank works: the view to [N, G, rest] is rank 3 (a rank-5 input
is viewed back to rank 5 and left to the rank rule). fp16 range is not this rule's concern: `patch_group_norm`
(the spelling rewrite, on by default) computes the same function down-scaled.
"""
from __future__ import annotations

import torch

from .nodes import calls, shape

_aten = torch.ops.aten


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    done = 0
    for n in calls(graph, _aten.group_norm.default):
        x, groups = n.args[0], int(n.args[1])
        weight = n.args[2] if len(n.args) > 2 else n.kwargs.get("weight")
        bias = n.args[3] if len(n.args) > 3 else n.kwargs.get("bias")
        eps = float(n.args[4]) if len(n.args) > 4 else float(n.kwargs.get("eps", 1e-5))
        dims = shape(x)
        if dims is None or len(dims) < 2 or dims[1] % groups:
            continue
        with graph.inserting_before(n):
            y = _written_out(graph, x, dims, groups, weight, bias, eps)
        n.replace_all_uses_with(y)
        done += 1
    return [f"group_norm -> mean and variance over [N, G, rest] x{done} (fp32 rounding)"] * bool(done), []


def _written_out(graph, x, dims, groups, weight, bias, eps):
    def call(target, *args):
        return graph.call_function(target, args)

    grouped = call(_aten.reshape.default, x, [dims[0], groups, -1])
    mean = call(_aten.mean.dim, grouped, [-1], True)
    centred = call(_aten.sub.Tensor, grouped, mean)
    var = call(_aten.mean.dim, call(_aten.mul.Tensor, centred, centred), [-1], True)
    normed = call(_aten.mul.Tensor, centred, call(_aten.rsqrt.default, call(_aten.add.Tensor, var, eps)))
    y = call(_aten.reshape.default, normed, list(dims))
    per_channel = [dims[1]] + [1] * (len(dims) - 2)
    if isinstance(weight, torch.fx.Node):
        y = call(_aten.mul.Tensor, y, call(_aten.reshape.default, weight, per_channel))
    if isinstance(bias, torch.fx.Node):
        y = call(_aten.add.Tensor, y, call(_aten.reshape.default, bias, per_channel))
    return y
