"""Rule: 3-D convolutions and pools (video models: R3D, S3D, Swin3D's patch embedding) become 2-D ones, with the
depth axis carried in the batch or channel axis, so that no value inside is rank 5.

The converter lowers aten.conv3d, max_pool3d, avg_pool3d and adaptive_avg_pool3d to rank-5 ops, and the GPU takes
no tensor of rank > 4 ("Tensor dimensions must be less than 5"). Each becomes:

  conv3d               when the depth stride equals the depth kernel (a patch embedding): one conv2d whose input
                       channels are (channel, depth tap) pairs -- [N, C, oD * kD, H, W] read as [N * oD, C * kD, H, W]
                       through one rank-4 permute, the weight read as [O, C / g * kD, kH, kW]. Otherwise one conv2d
                       per depth tap over the depths that tap reads (in the batch axis), summed. Depth padding is
                       an explicit zero pad. Equal to fp32 rounding: the same products, summed in another order.
  max_pool3d           separable: a 2-D pool over height and width (depth merged into the channels), then a (kD, 1)
                       pool over depth. Padding is written as copies of the edge, which never win a maximum over a
                       window that holds them. Bit-exact.
  avg_pool3d           the same split, the padding an explicit zero pad (count_include_pad=True: the divisor is
                       the whole window, the product of the two pools' divisors). Equal to fp32 rounding.
  adaptive_avg_pool3d  per pooled axis a mean over its cells, on a rank <= 4 view (cells of equal size as one
                       reshape and mean; uneven cells as slices, means and a concatenation). Equal to fp32 rounding.

The 2-D ops' results are viewed back to the rank-5 shape; the `rank` rule, which runs next, carries those views
at rank <= 4. Left as they were, and named by the driver's audit: string padding, dilation or ceil_mode in a pool,
a divisor override, count_include_pad=False with padding, a weight computed at run time, an unbatched input.
"""
from __future__ import annotations

import math

import torch

from .nodes import attr_value, calls, shape

_aten = torch.ops.aten


def _three(v) -> list[int]:
    v = [int(a) for a in v] if isinstance(v, (list, tuple)) else [int(v)]
    return v * 3 if len(v) == 1 else v


class _Emit:
    def __init__(self, gm: torch.fx.GraphModule):
        self.gm, self.graph = gm, gm.graph

    def __call__(self, target, *args):
        return self.graph.call_function(target, tuple(args))

    def view(self, x, dims):
        return self(_aten.reshape.default, x, [int(d) for d in dims])

    def constant(self, value: torch.Tensor):
        name = f"_legal_volume_{sum(1 for k, _ in self.gm.named_buffers() if k.startswith('_legal_volume_'))}"
        self.gm.register_buffer(name, value.detach().contiguous(), persistent=False)
        return self.graph.get_attr(name)


def _edge_pad(e: _Emit, x, axis: int, size: int, pad: int):
    """`x` with `pad` copies of its first and last slice along `axis` on either side (the max pool's padding)."""
    first = e(_aten.slice.Tensor, x, axis, 0, 1)
    last = e(_aten.slice.Tensor, x, axis, size - 1, size)
    return e(_aten.cat.default, [first] * pad + [x] + [last] * pad, axis)


# ---------------------------------------------------------------- conv3d

def _conv3d(e: _Emit, n):
    x, w = n.args[0], n.args[1]
    a = list(n.args) + [None, 1, 0, 1, 1][len(n.args) - 2:]
    b, stride, pad, dil, groups = a[2], _three(a[3]), _three(a[4]), _three(a[5]), int(a[6])
    if n.kwargs or not isinstance(w, torch.fx.Node) or w.op != "get_attr":
        return None
    weight = attr_value(e.gm, w.target)
    N, C, D, H, W = shape(x)
    Co, Cg, kD, kH, kW = weight.shape
    oD, oH, oW = shape(n)[2:]
    x4 = e.view(x, [N, C, D, H * W])
    if pad[0]:
        x4 = e(_aten.constant_pad_nd.default, x4, [0, 0, pad[0], pad[0]], 0.0)
        D += 2 * pad[0]
    rest = (stride[1:], pad[1:], dil[1:], groups)
    if stride[0] == kD and dil[0] == 1:                  # depth patches: taps into channels, one conv
        if D != oD * kD:
            x4 = e(_aten.slice.Tensor, x4, 2, 0, oD * kD)
        t = e(_aten.permute.default, e.view(x4, [N, C, oD, kD * H * W]), [0, 2, 1, 3])
        w2 = e.constant(weight.reshape(Co, Cg * kD, kH, kW))
        y = e(_aten.conv2d.default, e.view(t, [N * oD, C * kD, H, W]), w2, b, *rest)
    else:                                                # one conv per depth tap, the output depths in the batch
        t = e(_aten.permute.default, x4, [0, 2, 1, 3])  # [N, D, C, H * W]
        y = None
        for tap in range(kD):
            start = tap * dil[0]
            taken = e(_aten.slice.Tensor, t, 1, start, start + stride[0] * (oD - 1) + 1, stride[0])
            part = e(_aten.conv2d.default, e.view(taken, [N * oD, C, H, W]), e.constant(weight[:, :, tap]),
                     b if tap == 0 else None, *rest)
            y = part if y is None else e(_aten.add.Tensor, y, part)
    back = e(_aten.permute.default, e.view(y, [N, oD, Co, oH * oW]), [0, 2, 1, 3])
    return e.view(back, [N, Co, oD, oH, oW])


# ---------------------------------------------------------------- pools

def _pool_args(n, avg: bool):
    k = _three(n.args[1])
    s = _three(n.args[2]) if len(n.args) > 2 and n.args[2] else k
    p = _three(n.args[3]) if len(n.args) > 3 else [0, 0, 0]
    if avg:
        ceil, include, divisor = (list(n.args[4:]) + [False, True, None][len(n.args[4:]):])[:3]
        ok = not ceil and divisor is None and (include or not any(p))
    else:
        dil, ceil = (list(n.args[4:]) + [1, False][len(n.args[4:]):])[:2]
        ok = not ceil and _three(dil) == [1, 1, 1]
    return (k, s, p) if ok and not n.kwargs else None


def _pool3d(e: _Emit, n):
    avg = n.target is _aten.avg_pool3d.default
    args = _pool_args(n, avg)
    if args is None:
        return None
    k, s, p = args
    N, C, D, H, W = shape(n.args[0])
    oD, oH, oW = shape(n)[2:]
    op = _aten.avg_pool2d.default if avg else _aten.max_pool2d.default
    x = e.view(n.args[0], [N, C * D, H, W])
    for axis, size, q in ((2, H, p[1]), (3, W, p[2])):
        if q:
            x = (e(_aten.constant_pad_nd.default, x, [0, 0] * (3 - axis) + [q, q], 0.0) if avg
                 else _edge_pad(e, x, axis, size, q))
    x = e(op, x, k[1:], s[1:])                            # [N, C * D, oH, oW]
    x = e.view(x, [N, C, D, oH * oW])
    if p[0]:
        x = (e(_aten.constant_pad_nd.default, x, [0, 0, p[0], p[0]], 0.0) if avg
             else _edge_pad(e, x, 2, D, p[0]))
    x = e(op, x, [k[0], 1], [s[0], 1])                    # [N, C, oD, oH * oW]
    return e.view(x, [N, C, oD, oH, oW])


def _cells(e: _Emit, x, pre: int, n: int, m: int, post: int):
    """x viewed [pre, n, post] -> [pre, m, post]: torch's adaptive cells along the middle axis, each a mean."""
    x = e.view(x, [pre, n, post])
    if n % m == 0:
        return e(_aten.mean.dim, e.view(x, [pre, m, n // m, post]), [2])
    parts = [e(_aten.mean.dim, e(_aten.slice.Tensor, x, 1, (i * n) // m, math.ceil((i + 1) * n / m)), [1], True)
             for i in range(m)]
    return e(_aten.cat.default, parts, 1)


def _adaptive3d(e: _Emit, n):
    x, dims = n.args[0], list(shape(n.args[0]))
    for axis, m in enumerate(_three(n.args[1]), start=2):
        if dims[axis] != m:
            x = _cells(e, x, math.prod(dims[:axis]), dims[axis], m, math.prod(dims[axis + 1:]))
            dims[axis] = m
    return e.view(x, dims)


_HANDLERS = {_aten.conv3d.default: _conv3d, _aten.max_pool3d.default: _pool3d, _aten.avg_pool3d.default: _pool3d,
             _aten.adaptive_avg_pool3d.default: _adaptive3d}
_WHAT = {_aten.conv3d.default: "conv3d -> conv2d (fp32 rounding)",
         _aten.max_pool3d.default: "max_pool3d -> 2-D max pools (bit-exact)",
         _aten.avg_pool3d.default: "avg_pool3d -> 2-D average pools (fp32 rounding)",
         _aten.adaptive_avg_pool3d.default: "adaptive_avg_pool3d -> means (fp32 rounding)"}


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    e = _Emit(gm)
    done: dict = {}
    for n in calls(gm.graph, *_HANDLERS):
        if len(shape(n.args[0]) or ()) != 5 or shape(n) is None:
            continue
        with gm.graph.inserting_before(n):
            y = _HANDLERS[n.target](e, n)
        if y is None:
            continue
        y.meta = dict(n.meta)
        n.replace_all_uses_with(y)
        done[n.target] = done.get(n.target, 0) + 1
    gm.graph.eliminate_dead_code()
    return [f"{_WHAT[t]} x{k}" for t, k in done.items()], []
