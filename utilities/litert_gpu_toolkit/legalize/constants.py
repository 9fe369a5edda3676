"""Rule: an op the GPU refuses whose inputs are all constants is computed once, at export, and becomes a constant.

Constants are the module's parameters and buffers (get_attr nodes after export), literals, `zeros_like` and its kin
(their value is their static shape's), and ops whose inputs are all constants. An expand of a buffer (BROADCAST_TO),
an embedding lookup or gather with constant indices (GATHER / GATHER_ND), an arange, eye or linspace
(STABLEHLO_IOTA, which the interpreter does not register), a pad of a constant (PAD with no runtime input is
refused), a comparison, any bool or integer value computed from constants, a product of two constants that is no
larger than they are -- each becomes the tensor torch computes for it, on the same numbers: bit-exact. Random ops
are never constant. A folded value larger than `MAX_ELEMENTS` is left as it was (and named), so a fold never bloats
the file unboundedly.
"""
from __future__ import annotations

import math
import operator

import torch
from torch.fx.node import map_arg

from .nodes import attr_value, shape, source_line

_aten = torch.ops.aten
WALL_OPS = {
    _aten.expand.default, _aten.repeat.default, _aten.index.Tensor, _aten.index_select.default,
    _aten.gather.default, _aten.embedding.default, _aten.where.self, _aten.arange.default, _aten.arange.start,
    _aten.arange.start_step, _aten.eye.default, _aten.eye.m, _aten.linspace.default, _aten._to_copy.default,
    _aten.cumsum.default, _aten.constant_pad_nd.default, _aten.pad.default,
    _aten.eq.Scalar, _aten.eq.Tensor, _aten.ne.Scalar, _aten.ne.Tensor, _aten.lt.Scalar, _aten.lt.Tensor,
    _aten.le.Scalar, _aten.le.Tensor, _aten.gt.Scalar, _aten.gt.Tensor, _aten.ge.Scalar, _aten.ge.Tensor,
    _aten.logical_and.default, _aten.logical_or.default, _aten.logical_not.default, _aten.bitwise_and.Tensor,
    _aten.bitwise_or.Tensor, _aten.bitwise_not.default, _aten.__and__.Tensor, _aten.__or__.Tensor,
}
MAX_ELEMENTS = 1 << 22           # 4 M elements (16 MB in fp32) per folded value
# a constant index computed from a buffer (idx % n, idx + offset) is folded too, so the gather rule sees its values
_INDEXED = {_aten.index_select.default, _aten.index.Tensor, _aten.gather.default}


def _feeds_an_index(node: torch.fx.Node) -> bool:
    v = node.meta.get("val")
    return (isinstance(v, torch.Tensor) and not v.dtype.is_floating_point and v.numel() <= 1 << 16
            and any(u.op == "call_function" and u.target in _INDEXED for u in node.users))


def _foldable(node: torch.fx.Node) -> bool:
    """A constant worth computing at export: a wall op, a tuple item, an index, any bool / integer value (mask
    and index arithmetic, which the GPU refuses or runs in float, is cheaper as the tensor it makes), or a product
    of constants no larger than its operands."""
    v = node.meta.get("val")
    return (node.target in WALL_OPS or node.target is operator.getitem or _feeds_an_index(node)
            or (isinstance(v, torch.Tensor) and not v.dtype.is_floating_point) or _small_product(node))


# A product of two constants (Funnel's relative positions: `einsum("td,dnh->tnh", pos_embed, weight)`) is lowered
# as a BATCH_MATMUL with a constant left operand, which the GPU refuses. Computed at export it is the value torch
# computes (bit-exact against torch); folded only when the result holds no more elements than its operands, so the
# file does not grow.
_PRODUCTS = {_aten.einsum.default, _aten.matmul.default, _aten.bmm.default, _aten.mm.default}


def _small_product(node: torch.fx.Node) -> bool:
    if node.target not in _PRODUCTS:
        return False
    out, ins = shape(node), [shape(a) for a in node.all_input_nodes]
    return out is not None and None not in ins and math.prod(out) <= sum(math.prod(d) for d in ins)


def _random(node: torch.fx.Node) -> bool:
    name = str(node.target)
    return any(k in name for k in ("rand", "bernoulli", "dropout", "normal", "multinomial", "uniform"))


# ops whose value is their shape's alone (the graph's shapes are static): zeros_like(x) is constant whatever x holds
_SHAPE_ONLY = {_aten.zeros_like.default: 0.0, _aten.ones_like.default: 1.0, _aten.full_like.default: None,
               _aten.new_zeros.default: 0.0, _aten.new_ones.default: 1.0, _aten.new_full.default: None}


def _shape_only_value(n: torch.fx.Node):
    v = n.meta.get("val")
    fill = _SHAPE_ONLY[n.target]
    if fill is None:
        fill = n.args[1] if n.target is _aten.full_like.default else n.args[2]
    return torch.full(tuple(v.shape), fill, dtype=v.dtype)


def constant_nodes(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    const: set[torch.fx.Node] = set()
    for n in graph.nodes:
        if n.op == "get_attr" or (n.op == "call_function" and not _random(n)
                                   and (all(a in const for a in n.all_input_nodes) or _shape_only(n))):
            const.add(n)
    return const


def _shape_only(n: torch.fx.Node) -> bool:
    v = n.meta.get("val")
    return n.target in _SHAPE_ONLY and isinstance(v, torch.Tensor) and shape(n) is not None \
        and all(not isinstance(a, torch.fx.Node) for a in n.args[1:])


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    """Fold every constant wall op of `gm` (in place). Returns (what was folded, what was too large to fold)."""
    graph = gm.graph
    const = constant_nodes(graph)
    memo: dict[torch.fx.Node, object] = {}

    def value(n):
        if not isinstance(n, torch.fx.Node):
            return n
        if n not in memo:
            if n.op == "get_attr":
                memo[n] = attr_value(gm, n.target)
            elif _shape_only(n):
                memo[n] = _shape_only_value(n)
            else:
                args, kwargs = map_arg(n.args, value), map_arg(n.kwargs, value)
                with torch.no_grad():
                    memo[n] = n.target(*args, **kwargs)
        return memo[n]

    folded: dict[str, int] = {}
    left = []
    for i, n in enumerate(list(graph.nodes)):
        if n.op != "call_function" or n not in const or not n.users or not _foldable(n):
            continue
        if n.target is operator.getitem and not any(u.op == "call_function" for u in n.users):
            continue
        dims = shape(n)
        if dims is None:
            continue
        if math.prod(dims) > MAX_ELEMENTS:
            left.append(f"{_name(n)} of constants, {list(dims)}: too large to fold ({source_line(n) or 'no source'})")
            continue
        v = value(n)
        if not isinstance(v, torch.Tensor):
            continue
        name = f"_legal_const_{i}"
        gm.register_buffer(name, v.detach().clone(), persistent=False)
        with graph.inserting_before(n):
            node = graph.get_attr(name)
        node.meta = dict(n.meta)
        n.replace_all_uses_with(node)
        folded[_name(n)] = folded.get(_name(n), 0) + 1
    done = [f"folded constant {op} x{k} (bit-exact)" for op, k in folded.items()]
    return done, left


def _name(node: torch.fx.Node) -> str:
    return str(node.target).replace("aten.", "").split(".")[0] if node.op == "call_function" else node.op
