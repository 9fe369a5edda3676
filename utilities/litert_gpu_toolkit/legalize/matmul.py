"""Rule: a matrix product whose left operand is a constant and whose right one is not runs as its transpose.

The GPU takes a constant only as the right operand of BATCH_MATMUL ("Not supported batched mat mul case:
non-constant tensor" otherwise; measured on the software GPU: constant [2, 16, 16] @ runtime [2, 16, 32] is
rejected, runtime @ constant of either rank runs). Constants on the left come from the model (a learned query, a
table in an einsum torch orders constant-first) and from rewrites and folds (a one-hot gather is one-hot @ x).
C @ X is written (X^T @ C^T)^T: the constant transposed once at export (the converter folds it), the runtime
operand transposed on its last two axes. The same dot products of the same vectors: equal to fp32 rounding (the
kernel may sum in another order).

An attention (`scaled_dot_product_attention`) whose query is a constant -- a learned query attending to runtime
keys: AIMv2's and SigLIP's attention-pooling heads -- is lowered by the converter with that constant on the left
of the score product. It is written out as its math (scores = q * scale @ k^T, plus a float mask, softmax, @ v),
so the score product gets the transposed form above. Equal to fp32 rounding (the same products, which the
converter would have written too). A bool mask, causal masking, dropout or grouped heads leave it as it is.

A matmul that contracts an axis of size 1 (timm CSATv2's scalar attention, `(q @ k^T) @ v` with [B, N] operands
at batch 1: a [1, 1] @ [1, N] product) is the broadcast product a [..., M, 1] * b [..., 1, N]; litert-torch's
passes fail on it in that graph ("contracting dimension sizes must match"). One product per output, no sum:
bit-exact.

A batched matmul of two runtime operands whose right one is a single column (timm's global-context block: the
[B, 1, C, HW] features @ [B, 1, HW, 1] attention weights) makes litert-torch's passes fail when a 1x1 conv reads
the result ("'tfl.batch_matmul' op found invalid output rank, expected 3 but got 4"). It is (a * b^T).sum(-1,
keepdim=True): the same products summed over the same axis -- equal to fp32 rounding.

A matmul whose batch axes broadcast (DeBERTa's `query [B, H, S, d] @ pos_key^T [1, H, d, R]`) gets a BROADCAST_TO
of the smaller operand from the converter, which the GPU refuses. The axes only the left operand has are moved
into its rows (an [H, B * S, d] @ [H, d, R] product), or those only the right one has into its columns; the
result is viewed and permuted back. The same dot products: equal to fp32 rounding.
"""
from __future__ import annotations

import math

import torch

from .constants import constant_nodes
from .nodes import shape

_aten = torch.ops.aten
_MATMUL = {_aten.matmul.default, _aten.bmm.default, _aten.mm.default}


def _unbroadcast(graph, n) -> torch.fx.Node | None:
    """The matmul `n` with its batch broadcast folded into rows or columns, or None when it has none to fold."""
    a, b = n.args[:2]
    da, db, out = shape(a), shape(b), shape(n)
    if da is None or db is None or out is None or len(da) < 3 or len(db) < 3 or len(da) != len(db):
        return None
    batch = len(out) - 2
    only_a = [i for i in range(batch) if da[i] > 1 and db[i] == 1]
    only_b = [i for i in range(batch) if db[i] > 1 and da[i] == 1]
    if bool(only_a) == bool(only_b):
        return None                                   # nothing to fold, or both sides broadcast: left as it is
    shared = [i for i in range(batch) if i not in only_a + only_b]
    call = graph.call_function
    rows = [out[i] for i in shared]
    if only_a:
        m, k = da[-2], da[-1]
        x = call(_aten.permute.default, (a, shared + only_a + [batch, batch + 1]))
        x = call(_aten.reshape.default, (x, rows + [math.prod(da[i] for i in only_a) * m, k]))
        w = call(_aten.reshape.default, (b, rows + list(db[-2:])))
        y = call(_aten.matmul.default, (x, w))
        y = call(_aten.reshape.default, (y, rows + [da[i] for i in only_a] + [m, db[-1]]))
        order = shared + only_a
    else:
        k, nn = db[-2], db[-1]
        w = call(_aten.permute.default, (b, shared + [batch] + only_b + [batch + 1]))
        w = call(_aten.reshape.default, (w, rows + [k, math.prod(db[i] for i in only_b) * nn]))
        x = call(_aten.reshape.default, (a, rows + list(da[-2:])))
        y = call(_aten.matmul.default, (x, w))
        y = call(_aten.reshape.default, (y, rows + [da[-2]] + [db[i] for i in only_b] + [nn]))
        y = call(_aten.permute.default, (y, list(range(len(shared))) + [len(shared) + 1 + j for j in range(len(only_b))]
                                         + [len(shared), len(shared) + 1 + len(only_b)]))
        order = shared + only_b
    back = [order.index(i) for i in range(batch)] + [batch, batch + 1]
    return call(_aten.permute.default, (y, back)) if back != list(range(len(out))) else y


def _constant_query_attention(gm: torch.fx.GraphModule) -> int:
    """Every scaled_dot_product_attention with a constant query, written out as matmuls and a softmax."""
    graph = gm.graph
    const = constant_nodes(graph)
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not _aten.scaled_dot_product_attention.default or not n.users:
            continue
        q, k, v, *rest = n.args
        mask, dropout, causal = (rest + [None, 0.0, False][len(rest):])[:3]
        scale = n.kwargs.get("scale")
        dims = shape(q)
        if (q not in const or k in const or dims is None or dropout or causal or n.kwargs.get("enable_gqa")
                or (isinstance(mask, torch.fx.Node) and not (shape(mask) and mask.meta["val"].is_floating_point()))):
            continue
        call = graph.call_function
        with graph.inserting_before(n):
            qs = call(_aten.mul.Tensor, (q, float(scale) if scale is not None else dims[-1] ** -0.5))
            scores = call(_aten.matmul.default, (qs, call(_aten.transpose.int, (k, -1, -2))))
            if isinstance(mask, torch.fx.Node):
                scores = call(_aten.add.Tensor, (scores, mask))
            y = call(_aten.matmul.default, (call(_aten._softmax.default, (scores, -1, False)), v))
        y.meta = dict(n.meta)
        n.replace_all_uses_with(y)
        graph.erase_node(n)                       # torch counts it impure (dropout), so dead-code removal keeps it
        done += 1
    return done


def _each_matmul(graph: torch.fx.Graph, make) -> int:
    """Every read matmul whose operands' shapes are known, replaced by make(a, b, da, db) where that is not None."""
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _MATMUL or not n.users:
            continue
        a, b = n.args[:2]
        da, db = shape(a), shape(b)
        if da is None or db is None:
            continue
        with graph.inserting_before(n):
            y = make(a, b, da, db)
        if y is not None:
            n.replace_all_uses_with(y)
            done += 1
    return done


def _outer_products(graph: torch.fx.Graph) -> int:
    """A matmul that contracts an axis of size 1 is a broadcast product: a [..., M, 1] * b [..., 1, N]."""
    def make(a, b, da, db):
        if len(da) >= 2 and len(db) >= 2 and da[-1] == 1 and db[-2] == 1:
            return graph.call_function(_aten.mul.Tensor, (a, b))
        return None
    return _each_matmul(graph, make)


def _column_products(graph: torch.fx.Graph) -> int:
    """A runtime matmul whose right operand is one runtime column is a product and a sum over the contracted axis:
    (a * b^T).sum(-1, keepdim=True)."""
    const = constant_nodes(graph)

    def make(a, b, da, db):
        if len(da) < 3 or len(db) < 3 or db[-1] != 1 or da[-1] == 1 or b in const:
            return None
        row = graph.call_function(_aten.transpose.int, (b, -1, -2))
        return graph.call_function(_aten.sum.dim_IntList, (graph.call_function(_aten.mul.Tensor, (a, row)), [-1], True))
    return _each_matmul(graph, make)


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    outer = _outer_products(graph)
    column = _column_products(graph)
    attention = _constant_query_attention(gm)
    broadcast = 0
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target in (_aten.matmul.default, _aten.bmm.default) and n.users:
            with graph.inserting_before(n):
                y = _unbroadcast(graph, n)
            if y is not None:
                n.replace_all_uses_with(y)
                broadcast += 1
    const = constant_nodes(graph)
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in _MATMUL or n in const or not n.users:
            continue
        a, b = n.args[:2]
        # a node this rule just made has no shape yet: its operands are of rank >= 3
        if a not in const or b in const or len(shape(a) or (0, 0)) < 2 or len(shape(b) or (0, 0)) < 2:
            continue
        call = graph.call_function
        with graph.inserting_before(n):
            bt = call(_aten.transpose.int, (b, -1, -2))
            at = call(_aten.transpose.int, (a, -1, -2))
            out = call(_aten.transpose.int, (call(n.target, (bt, at)), -1, -2))
        n.replace_all_uses_with(out)
        done += 1
    return ([f"matmul over an axis of size 1 -> a broadcast product x{outer} (bit-exact)"] * bool(outer)
            + [f"batched matmul by one runtime column -> a product and a sum x{column} (fp32 rounding)"]
            * bool(column)
            + [f"attention with a constant query -> matmuls and a softmax x{attention} (fp32 rounding)"]
            * bool(attention)
            + [f"matmul whose batch axes broadcast -> folded into rows / columns x{broadcast} (fp32 rounding)"]
            * bool(broadcast) + [f"matmul with a constant left operand -> transposed x{done} (fp32 rounding)"]
            * bool(done)), []
