"""Growing a tensor along axes of size 1 by concatenating it with itself: the GPU's form of a broadcast."""
from __future__ import annotations

import torch

_aten = torch.ops.aten


def expand_by_concat(graph: torch.fx.Graph, y, src: tuple[int, ...], out: tuple[int, ...]):
    """`y` (of shape `src`, same rank as `out` or lower) grown to `out`: new leading axes by a reshape, then each
    axis of size 1 repeated by doubling (about 2 log2(n) CONCATENATION / SLICE ops for n copies). Bit-exact."""
    if len(src) < len(out):
        src = (1,) * (len(out) - len(src)) + tuple(src)
        y = graph.call_function(_aten.view.default, (y, list(src)))
    for axis, (a, b) in enumerate(zip(src, out)):
        if a == 1 and b > 1:
            y = _repeat(graph, y, axis, b)
    return y


def _repeat(graph: torch.fx.Graph, y, axis: int, n: int):
    size = 1
    while size < n:
        take = min(size, n - size)
        part = y if take == size else graph.call_function(_aten.slice.Tensor, (y, axis, 0, take))
        y = graph.call_function(_aten.cat.default, ([y, part], axis))
        size += take
    return y
