"""Rule: a sliding window (`Tensor.unfold(dim, size, step)`: STFT framing, UnivNet's location-variable convolution,
image patches) becomes a one-hot convolution.

The converter lowers aten.unfold to a GATHER_ND (and makes a rank-5 value of a rank-4 input's windows), which the
GPU refuses. Here the windowed axis is moved last and the others merged into the batch, [M, 1, L]; a conv1d whose
output channel j is one-hot on tap j (stride `step`, no bias) gives [M, size, n]; the windows are transposed to
[M, n, size] and viewed and permuted back to torch's layout (the window index where `dim` was, the taps last).
The `rank` rule, which runs next, carries any value of rank > 4 this makes. Exact for finite values: each output
is one sample times 1.0 plus exact zeros (an inf or NaN sample also makes NaN in the windows beside it, 0 * inf).
A window of one sample at step one is the tensor with a new last axis (a reshape): bit-exact. A bool mask's windows
(Gemma 3n's audio attention unfolds its padding mask) or an integer tensor's are made the same way on the float32
copy and read back (a bool as `!= 0`, an integer cast back): exact for integers below 2**24.
"""
from __future__ import annotations

import math

import torch

from .nodes import calls, shape

_aten = torch.ops.aten


_CARRIED = (torch.float32, torch.bool, torch.int32, torch.int64)


def _windows(gm: torch.fx.GraphModule, n, kind, x=None) -> torch.fx.Node | None:
    """The windows of `x` (default: the unfold's input, of dtype `kind`) as a one-hot conv1d."""
    x, (_, dim, size, step) = (n.args[0] if x is None else x), n.args[:4]
    dims, out = shape(n.args[0]), shape(n)
    if dims is None or out is None or not dims:
        return None
    graph, r = gm.graph, len(dims)
    d = dim % r
    call = graph.call_function
    if size == 1 and step == 1:
        return call(_aten.reshape.default, (x, list(out)))
    if not kind.is_floating_point:      # a mask or integer windows: the same copies, made in float32
        y = _windows(gm, n, torch.float32, call(_aten._to_copy.default, (x,), {"dtype": torch.float32}))
        return (call(_aten.ne.Scalar, (y, 0.0)) if kind is torch.bool
                else call(_aten._to_copy.default, (y,), {"dtype": kind}))
    count = out[d]
    others = [a for a in range(r) if a != d]
    moved = call(_aten.permute.default, (x, others + [d])) if d != r - 1 else x
    flat = call(_aten.reshape.default, (moved, [math.prod(dims[a] for a in others), 1, dims[d]]))
    name = f"_legal_window_{n.name}"
    gm.register_buffer(name, torch.eye(size, dtype=torch.float32)[:, None, :].contiguous(), persistent=False)
    taps = call(_aten.conv1d.default, (flat, graph.get_attr(name), None, [step]))       # [M, size, n]
    y = call(_aten.transpose.int, (taps, 1, 2))                                          # [M, n, size]
    y = call(_aten.reshape.default, (y, [dims[a] for a in others] + [count, size]))
    order = list(range(d)) + [r - 1] + list(range(d, r - 1)) + [r]    # the window index back where dim was
    return call(_aten.permute.default, (y, order)) if order != list(range(r + 1)) else y


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    done = 0
    for n in calls(gm.graph, _aten.unfold.default):
        if shape(n.args[0]) is None or not shape(n.args[0]) or n.args[0].meta["val"].dtype not in _CARRIED:
            continue
        kind = n.args[0].meta["val"].dtype
        with gm.graph.inserting_before(n):
            y = _windows(gm, n, kind)
        if y is None:
            continue
        y.meta = dict(n.meta)
        n.replace_all_uses_with(y)
        done += 1
    gm.graph.eliminate_dead_code()
    return [f"unfold (sliding windows) -> one-hot conv1d x{done} (exact for finite values)"] * bool(done), []
