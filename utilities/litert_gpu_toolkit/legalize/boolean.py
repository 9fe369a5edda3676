"""Rule: a bool attention mask becomes the additive float mask the GPU runs, built with float arithmetic; so does
a bool mask cast to float (eager attention builds its additive mask from that cast).

The GPU refuses bool tensors in arithmetic (LOGICAL_AND, SELECT_V2 on a bool mask, a BROADCAST_TO of one). A bool
mask read by `scaled_dot_product_attention` is rebuilt from its inputs as a {0, 1} float tensor: `a & b` ->
a * b, `a | b` -> max(a, b), `~a` -> 1 - a, a cast of an integer tensor to bool -> min(|x|, 1), a comparison ->
its result cast to float (a comparison the GPU runs, read by arithmetic), views, slices and expands carried over as
they are (all exact on {0, 1} values; the cast is exact for integers below 2**24). The
attention then gets (m - 1) * MASK_FILL: 0 where the bool mask attends, -1e4 where it does not, expanded to the
scores' shape by concatenation. Bound: a masked key's softmax weight is exp(-1e4 + s - max) = 0 in fp32 exactly,
as with the bool mask, whenever the scores stay below ~4900 in magnitude (fp16: the same at its own underflow).
A row the bool mask masks entirely (NaN with a bool mask) is not legalized: the driver's check refuses it.
"""
from __future__ import annotations

import math

import torch

from ..rewrites.shared import FP16_MAX
from .nodes import dtype as _dtype, shape, source_line
from .repeat import expand_by_concat

_aten = torch.ops.aten
MASK_FILL = 1e4          # finite in fp16; exp(-1e4) is 0 in fp32
_AND = {_aten.__and__.Tensor, _aten.logical_and.default, _aten.bitwise_and.Tensor}
_OR = {_aten.__or__.Tensor, _aten.logical_or.default, _aten.bitwise_or.Tensor}
_NOT = {_aten.logical_not.default, _aten.bitwise_not.default}
_CARRY = {_aten.view.default, _aten._unsafe_view.default, _aten.reshape.default, _aten.permute.default,
          _aten.transpose.int, _aten.unsqueeze.default, _aten.squeeze.dim, _aten.squeeze.dims, _aten.slice.Tensor,
          _aten.select.int, _aten.clone.default, _aten.alias.default}
# a comparison of runtime values stays a comparison (the GPU runs it), its bool result cast to float once
_COMPARE = {getattr(getattr(_aten, op), kind) for op in ("eq", "ne", "lt", "le", "gt", "ge")
            for kind in ("Scalar", "Tensor")}
_INTEGER = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


class _Floats:
    """The {0, 1} float form of bool nodes, built once each, inserted before the attention that needs it."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm, self.graph, self.made = gm, gm.graph, {}

    def of(self, n):
        if n not in self.made:
            self.made[n] = self._make(n)
        return self.made[n]

    def _make(self, n):
        g = self.graph
        if n.op == "get_attr":
            return g.call_function(_aten._to_copy.default, (n,), {"dtype": torch.float32})
        if n.op != "call_function":
            return None
        t = n.target
        if t in _AND or t in _OR:
            a, b, out = self.of(n.args[0]), self.of(n.args[1]), shape(n)
            if a is None or b is None or out is None:
                return None
            # both operands at the result's shape: a broadcast of both sides is a BROADCAST_TO once converted
            a, b = (expand_by_concat(g, f, shape(x), out) for f, x in ((a, n.args[0]), (b, n.args[1])))
            return g.call_function(_aten.mul.Tensor if t in _AND else _aten.maximum.default, (a, b))
        if t in _NOT:
            a = self.of(n.args[0])
            return None if a is None else g.call_function(_aten.rsub.Scalar, (a, 1.0))
        if t is _aten.expand.default:        # by concatenation here: the expand rule reads shapes these nodes lack
            a, src, out = self.of(n.args[0]), shape(n.args[0]), shape(n)
            return None if a is None or src is None or out is None else expand_by_concat(g, a, src, out)
        if t is _aten.cat.default:           # Funnel's pooled mask: a cat of bool slices, then a strided slice
            parts = [self.of(a) for a in n.args[0]]
            return None if any(p is None for p in parts) else g.call_function(t, (parts, *n.args[1:]),
                                                                             dict(n.kwargs))
        if t in _CARRY:
            a = self.of(n.args[0])
            return None if a is None else g.call_function(t, (a, *n.args[1:]), dict(n.kwargs))
        if t is _aten._to_copy.default and _dtype(n.args[0]) in _INTEGER:
            x = g.call_function(_aten._to_copy.default, (n.args[0],), {"dtype": torch.float32})
            return g.call_function(_aten.clamp.default, (g.call_function(_aten.abs.default, (x,)), None, 1.0))
        if t is _aten._to_copy.default and _dtype(n.args[0]) is torch.bool:
            return self.of(n.args[0])
        if t in _COMPARE:
            return g.call_function(_aten._to_copy.default, (n,), {"dtype": torch.float32})
        return None


def _casts(gm: torch.fx.GraphModule, floats: _Floats) -> int:
    """Every cast of a runtime bool tensor to float32 replaced by the bool tensor's float form."""
    done = 0
    for n in list(gm.graph.nodes):
        if (n.op == "call_function" and n.target is _aten._to_copy.default and n.users
                and _dtype(n) == torch.float32 and _dtype(n.args[0]) is torch.bool
                and n.args[0].op == "call_function"):
            with gm.graph.inserting_before(n):
                f = floats.of(n.args[0])
            if f is not None:
                n.replace_all_uses_with(f)
                done += 1
    return done


_WHERE = {_aten.where.self, _aten.where.ScalarOther, _aten.where.ScalarSelf, _aten.where.Scalar}
_MASKED_FILL = {_aten.masked_fill.Scalar, _aten.masked_fill.Tensor}     # masked_fill(x, c, v) = where(c, v, x)


def _big(v) -> float | None:
    """A number beyond fp16's range (HF's finfo(float32).min fill, or an infinite one), else None."""
    return float(v) if isinstance(v, (int, float)) and not math.isnan(v) and abs(v) > FP16_MAX else None


def _select(g, cf, a, b):
    """where(c, a, b) with c's {0, 1} float form `cf`: a * cf + b * (1 - cf), a number beyond fp16's range never
    multiplied: its term is clamp(log(1 - k), min=c) with k its {0, 1} selector -- c where k is 1 (log 0 = -inf,
    clamped), 0 where k is 0 -- so no 0 * c and no inf - inf on the fp16 GPU; an infinite fill is log(1 - k) itself
    (or its negation for +inf), unclamped. Exact: each output is the selected value plus exact zeros (a -0 may come
    back as +0), provided the other branch is finite where the fill is selected (inf * 0 is NaN)."""
    call = g.call_function
    terms = []
    for value, keep in ((a, cf), (b, None)):
        if keep is None:
            keep = call(_aten.rsub.Scalar, (cf, 1.0))
        big = _big(value)
        if big is not None:
            off = call(_aten.log.default, (call(_aten.rsub.Scalar, (keep, 1.0)),))   # -inf where kept, 0 elsewhere
            if math.isinf(big):
                terms.append(off if big < 0 else call(_aten.neg.default, (off,)))
            else:
                terms.append(call(_aten.clamp.default, (off, big)) if big < 0 else
                             call(_aten.clamp.default, (call(_aten.neg.default, (off,)), None, big)))
        elif isinstance(value, (int, float)):
            if value != 0:
                terms.append(call(_aten.mul.Tensor, (keep, float(value))))
        else:
            terms.append(call(_aten.mul.Tensor, (value, keep)))
    if not terms:
        return call(_aten.mul.Tensor, (cf, 0.0))
    out = terms[0]
    for t in terms[1:]:
        out = call(_aten.add.Tensor, (out, t))
    return out


def _wheres(gm: torch.fx.GraphModule, floats: _Floats) -> int:
    """Every float `where` on a bool condition (SELECT_V2, which the GPU refuses; with a constant condition
    broadcast over a runtime tensor its kernel fails to build) as arithmetic."""
    done = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _WHERE | _MASKED_FILL or _dtype(n) != torch.float32 \
                or not n.users:
            continue
        cond, a, b = n.args[:3] if n.target in _WHERE else (n.args[1], n.args[2], n.args[0])
        if not isinstance(cond, torch.fx.Node) or cond.op not in ("call_function", "get_attr") \
                or _dtype(cond) is not torch.bool:
            continue
        if any(isinstance(v, float) and math.isnan(v) for v in (a, b)) or shape(n) is None:
            continue
        if any(isinstance(v, torch.fx.Node) and _dtype(v) != torch.float32 for v in (a, b)):
            continue
        with gm.graph.inserting_before(n):
            cf = floats.of(cond)
            if cf is None:
                continue
            out = _select(gm.graph, cf, a, b)
        n.replace_all_uses_with(out)
        done += 1
    return done


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    # one cache per walk over the graph: a float form made for a late cast must not be reused by an earlier where
    casts = _casts(gm, _Floats(gm))
    wheres = _wheres(gm, _Floats(gm))
    # one float form per mask for every attention that reads it (a model's layers share their mask); made before
    # the first of them in graph order, so before every later one too
    floats_of, additive_of = _Floats(gm), {}
    done, left = 0, []
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not _aten.scaled_dot_product_attention.default:
            continue
        mask = n.args[3] if len(n.args) > 3 else n.kwargs.get("attn_mask")
        if not isinstance(mask, torch.fx.Node) or _dtype(mask) is not torch.bool:
            continue
        q, k = shape(n.args[0]), shape(n.args[1])
        m = shape(mask)
        if q is None or k is None or m is None or len(q) != 4:
            left.append(f"bool attention mask of rank {len(m or ())} ({source_line(n) or 'no source'})")
            continue
        scores = (q[0], q[1], q[2], k[2])
        if (mask, scores) not in additive_of:
            with graph.inserting_before(n):
                floats = floats_of.of(mask)
                if floats is None:
                    left.append(f"bool attention mask from {mask.target} ({source_line(mask) or 'no source'})")
                    continue
                additive = graph.call_function(_aten.mul.Tensor,
                                               (graph.call_function(_aten.sub.Tensor, (floats, 1.0)), MASK_FILL))
                additive_of[mask, scores] = expand_by_concat(graph, additive, (1,) * (4 - len(m)) + m, scores)
        additive = additive_of[mask, scores]
        args = list(n.args)
        if len(args) > 3:
            args[3] = additive
            n.args = tuple(args)
        else:
            n.kwargs = {**n.kwargs, "attn_mask": additive}
        done += 1
    return ([f"bool attention mask -> additive float mask x{done} (exact; bound in legalize.boolean)"] * bool(done)
            + [f"bool mask cast to float -> float arithmetic x{casts} (bit-exact)"] * bool(casts)
            + [f"where on a bool mask -> float arithmetic x{wheres} (exact for finite values)"] * bool(wheres)), left
