"""Rule: an elementwise op between a runtime tensor and a constant, at rank 2 or 3, is computed at rank 4.

The wall is silent: such an op converts, runs at full residency and returns wrong numbers in fp16 and fp32 alike
whenever the constant spans more than its last axis or the runtime side has a lower rank than the result (the
measurements, and the delegate's layout that explains them, are in `rewrites/constant_operand.py`, the same wall met
on the module's spelling). On the exported graph it matters more than in the source: the constants rule itself
makes new constants (a folded one-hot table times a runtime mask is `[16, 16, 1] * [1, 16, 1]`), and a constant the
converter can see through is a constant here too.

Both operands are aligned to the result's rank and given trailing size-1 axes up to rank 4, with one leading
size-1 axis when the result's first axis is > 1 and the runtime side broadcasts over it; the result is viewed back.
Bit-exact: the same elementwise values, only views change.

The same wall at rank 4: a runtime [1, H, S, T] that is only a view of a rank-3 [H, S, T] (attention scores:
`bmm(q, k).view(1, H, S, T) + mask`, or `x.unsqueeze(0) + c`) reaches the converter as the rank-3 value, since it
drops the view, so the op reads a rank-3 runtime tensor against a rank-4 constant -- wrong on the GPU alone
(measured on llvmpipe, ai-edge-litert 2.3.0: [4, 12, 12] + [1, 1, 12, 12], corr 0.68; into a softmax 0.54; the
same with a [1, 12, 12] constant is right). Such an op is computed at rank 3 on both sides ([H, S, T] and the
constant without its leading 1) and viewed back: bit-exact. XGLM's attention met it (held-out row).

The same family, another op: a zero pad of a rank-3 runtime tensor whose first axis is > 1 compiles GPU-only and
is wrong (MobileBERT's trigram embedding, its ids shifted each way with a pad, two sequences in the batch; the
measurements are in `rewrites/constant_operand.py`); the same pad of the tensor viewed as [1, B, S, C] is right.
Such a pad gets that leading axis (the pad list names the last axes, so it is unchanged): bit-exact. A pad of a
rank-1 or rank-2 runtime tensor is refused outright ("Invalid paddings tensor shape: expected 4x2 or 3x2"; Gemma
3n's audio relative-position shift pads a [64, 5] value) and gets leading axes to rank 4 the same way.
"""
from __future__ import annotations

import math

import torch

from .constants import constant_nodes
from .nodes import shape

_aten = torch.ops.aten
OPS = {_aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor, _aten.rsub.Tensor,
       _aten.maximum.default, _aten.minimum.default, _aten.pow.Tensor_Tensor}
# a linear layer's [1, S, D] output is a rank-2 FULLY_CONNECTED result once converted (the converter drops the
# reshape back in front of a broadcasting op), and so is a transpose of it that the converter moves the op across
_PASS_THROUGH = {_aten.transpose.int, _aten.permute.default, _aten.clone.default, _aten.alias.default,
                 _aten.dropout.default}


def _flattened(node) -> bool:
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _PASS_THROUGH:
        node = node.args[0]
    dims = shape(node)
    return (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is _aten.linear.default
            and dims is not None and len(dims) == 3 and dims[0] == 1)


def _floating(node) -> bool:
    v = node.meta.get("val")
    return isinstance(v, torch.Tensor) and v.dtype.is_floating_point


def _layout(run, const, out) -> int | None:
    """Leading size-1 axes for the rank-4 form, or None when the op is right as it is."""
    src, c = shape(run), shape(const)
    if src is None or c is None or len(out) not in (2, 3) or math.prod(c) <= 1:
        return None
    spans = len(c) >= 2 and math.prod(c) > c[-1]
    if not (spans or len(src) < len(out) or _flattened(run)):
        return None
    first = ((1,) * (len(out) - len(src)) + src)[0]
    return 1 if out[0] > 1 and first == 1 else 0


_VIEWS = {_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default, _aten.unsqueeze.default}


def _leading_one_view(run, const, out) -> bool:
    """A rank-4 [1, ...] result whose runtime side is a view of the rank-3 value without that 1 (the converter drops
    the view) and whose constant spans more than one element."""
    c, src = shape(const), shape(run)
    if out is None or len(out) != 4 or out[0] != 1 or c is None or math.prod(c) <= 1 or src != tuple(out):
        return False
    if not (isinstance(run, torch.fx.Node) and run.op == "call_function" and run.target in _VIEWS):
        return False
    return shape(run.args[0]) == tuple(out[1:])


def _drop_leading_one(graph, n, a, b, out, const):
    """n(a, b) computed as n(a', b') on [H, S, T] (both sides without the leading 1), viewed back to `out`."""
    def three(x):
        dims = shape(x)
        aligned = (1,) * (4 - len(dims)) + tuple(dims)
        return graph.call_function(_aten.view.default, (x, list(aligned[1:])))
    op = graph.call_function(n.target, (three(a), three(b), *n.args[2:]), dict(n.kwargs))
    return graph.call_function(_aten.view.default, (op, list(out)))


def _lift(graph, node, dims, rank: int, lead: int):
    aligned = (1,) * (rank - len(dims)) + tuple(dims)
    return graph.call_function(_aten.view.default, (node, [1] * lead + list(aligned) + [1] * (4 - rank - lead)))


_PADS = (_aten.constant_pad_nd.default, _aten.pad.default)


def _rank3_pads(graph: torch.fx.Graph, const: set) -> int:
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _PADS or n in const or not n.users:
            continue
        if n.target is _aten.pad.default and (n.args[2] if len(n.args) > 2 else n.kwargs.get("mode", "constant")) \
                != "constant":
            continue                                 # reflect / replicate: not this wall's op
        x, out = n.args[0], shape(n)
        dims = shape(x)
        if dims is None or out is None or not _floating(n):
            continue
        if not (len(dims) in (1, 2) or len(dims) == 3 and dims[0] > 1):
            continue
        with graph.inserting_before(n):
            up = graph.call_function(_aten.reshape.default, (x, [1] * (4 - len(dims)) + list(dims)))
            pad = graph.call_function(n.target, (up, *n.args[1:]), dict(n.kwargs))
            back = graph.call_function(_aten.reshape.default, (pad, list(out)))
        n.replace_all_uses_with(back)
        done += 1
    return done


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    const = constant_nodes(graph)
    pads = _rank3_pads(graph, const)
    done = rank3 = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in OPS or n in const or len(n.args) < 2:
            continue
        a, b, out = n.args[0], n.args[1], shape(n)
        if out is None or not all(isinstance(x, torch.fx.Node) for x in (a, b)) or not _floating(n):
            continue
        if (a in const) == (b in const):
            continue
        run, c = (b, a) if a in const else (a, b)
        if _leading_one_view(run, c, tuple(out)):
            with graph.inserting_before(n):
                n.replace_all_uses_with(_drop_leading_one(graph, n, a, b, tuple(out), c))
            rank3 += 1
            continue
        lead = _layout(run, c, out)
        if lead is None:
            continue
        with graph.inserting_before(n):
            args = [_lift(graph, x, shape(x), len(out), lead) for x in (a, b)]
            op = graph.call_function(n.target, (*args, *n.args[2:]), dict(n.kwargs))
            back = graph.call_function(_aten.view.default, (op, list(out)))
        n.replace_all_uses_with(back)
        done += 1
    return ([f"elementwise op on a constant at rank 2-3 -> at rank 4 x{done} (bit-exact)"] * bool(done)
            + [f"elementwise op of a [1, ...] view and a rank-4 constant -> at rank 3 x{rank3} (bit-exact)"]
            * bool(rank3)
            + [f"zero pad of a rank-1 to 3 value -> at rank 4 x{pads} (bit-exact)"] * bool(pads)), []
