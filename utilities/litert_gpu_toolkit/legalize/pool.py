"""Rule: an adaptive average pool whose output size does not divide its input (PSPNet / UperNet pyramid pooling:
16 -> 3, 16 -> 6) becomes one mean per output cell along each such axis, and one concatenation.

The converter lowers such a pool through rank-5 and rank-6 sums and a BROADCAST_TO (measured: UperNet's pyramid
pooling, "Tensor dimensions must be less than 5" on 19 ADDs). Cell i of an axis of size n pooled to m covers
[floor(i n / m), ceil((i + 1) n / m)), as torch defines it; the pool is separable (the mean over a rectangle is
the mean over its rows of the means over its columns), so each non-dividing axis is done on its own and what is
left is an ordinary pool (or none). Equal to fp32 rounding (the same sums, in another order).

An average pool whose `ceil_mode=True` / `count_include_pad=False` change nothing at its shape (no padding, the
windows tile the input: timm NextViT's patch embedding, 2 x 2 stride 2 on an even map) is written with the defaults:
the converter lowers those flags to STABLEHLO_REDUCE_WINDOW pairs and a DIV, which the GPU rejects, whatever the
shape (measured: NextViT, 6 REDUCE_WINDOW on the CPU). Bit-exact: the same windows and the same divisor.
"""
from __future__ import annotations

import math

import torch

from .nodes import calls, shape

_aten = torch.ops.aten


def _cells(graph, x, axis: int, n: int, m: int):
    parts = []
    for i in range(m):
        a, b = (i * n) // m, math.ceil((i + 1) * n / m)
        part = graph.call_function(_aten.slice.Tensor, (x, axis, a, b))
        parts.append(graph.call_function(_aten.mean.dim, (part, [axis], True)))
    return graph.call_function(_aten.cat.default, (parts, axis))


def _inert_flags(gm: torch.fx.GraphModule) -> int:
    """avg_pool2d calls whose ceil_mode / count_include_pad flags are no-ops at their shape, written without them."""
    done = 0
    for n in calls(gm.graph, _aten.avg_pool2d.default):
        x, k, *rest = n.args
        s = rest[0] if rest and rest[0] else k
        p = rest[1] if len(rest) > 1 else [0, 0]
        ceil, include = (rest[2] if len(rest) > 2 else False), (rest[3] if len(rest) > 3 else True)
        divisor = rest[4] if len(rest) > 4 else None
        dims = shape(x)
        k, s, p = ([v] * 2 if isinstance(v, int) else list(v) for v in (k, s, p))
        if dims is None or n.kwargs or divisor is not None or any(p) or (not ceil and include) or len(k) != 2:
            continue
        if any((dims[-2 + a] - k[a]) % s[a] for a in range(2)):
            continue                                     # a ceil-mode overhang: a real partial window
        n.args = (x, k, s, [0, 0], False, True)
        n.kwargs = {}
        done += 1
    return done


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    flags = _inert_flags(gm)
    done = 0
    for n in calls(graph, _aten.adaptive_avg_pool2d.default):
        dims, out = shape(n.args[0]), list(n.args[1])
        if dims is None or len(dims) not in (3, 4):
            continue
        rank = len(dims)
        uneven = [(rank - 2 + k, dims[rank - 2 + k], out[k]) for k in range(2) if dims[rank - 2 + k] % out[k]]
        if not uneven:
            continue
        y = n.args[0]
        with graph.inserting_before(n):
            for axis, size, cells in uneven:
                y = _cells(graph, y, axis, size, cells)
            if len(uneven) < 2:                              # the other axis divides: an ordinary pool
                y = graph.call_function(_aten.adaptive_avg_pool2d.default, (y, out))
        n.replace_all_uses_with(y)
        done += 1
    return ([f"adaptive average pool with uneven cells -> means of slices x{done} (fp32 rounding)"] * bool(done)
            + [f"average pool's ceil_mode / count_include_pad, no-ops at its shape -> dropped x{flags} (bit-exact)"]
            * bool(flags)), []
