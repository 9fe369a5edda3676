"""Rule: a gather along one axis with indices known at export (GATHER / GATHER_ND once converted) becomes slices
and one concatenation: each run of consecutive indices is one slice. A copy of the same elements: bit-exact.

Covers `index_select(x, dim, idx)` and `x[..., idx, ...]` (`index.Tensor` with one 1-D index tensor, the other
axes taken whole) where `idx` is a constant (a buffer, or what the constants rule folded) and `x` is a runtime
tensor; and `x[i0, i1, ...]` with several constant index tensors on the leading axes (HF's mask builder's
`padding_mask[batch_idx, kv_idx]`, its indices broadcast to [B, 1, 1, S]): the leading axes are flattened, the
broadcast indices become one flat index, and its runs are slices of the flattened tensor, viewed to the result's
shape. At most `MAX_RUNS` runs: a lookup with more scattered indices stays a gather and is named.

The other way round -- a constant table indexed by runtime ids on its first axis (GPT-J's
`embed_positions[position_ids]`, a learned bias table read at runtime positions) -- is a true lookup: it becomes
the embedding lookup the GPU takes (EMBEDDING_LOOKUP; the table flattened to 2-D first). Bit-exact for ids in
[0, N), the range an embedding accepts (a negative id, which indexing wraps, is outside it).
"""
from __future__ import annotations

import math

import torch

from .nodes import attr_value, calls, shape, source_line
from .one_hot import float_one_hot

_aten = torch.ops.aten
MAX_RUNS = 32


def constant_value(gm, node):
    """The tensor a get_attr node names (a parameter, buffer or folded constant), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "get_attr":
        return None
    value = attr_value(gm, node.target)
    return value if isinstance(value, torch.Tensor) else None


def runs_of(idx: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for i in idx:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def rows(graph: torch.fx.Graph, x, axis: int, runs: list[tuple[int, int]]):
    """x's entries along `axis` at the (start, length) `runs`, in order: slices and one concatenation."""
    parts = [graph.call_function(_aten.slice.Tensor, (x, axis, a, a + k)) for a, k in runs]
    return parts[0] if len(parts) == 1 else graph.call_function(_aten.cat.default, (parts, axis))


def _axis_and_index(gm, n):
    """(axis, index tensor) of a gather this rule can rewrite, or None."""
    if n.target is _aten.index_select.default:
        return n.args[1], constant_value(gm, n.args[2])
    if n.target is _aten.index.Tensor:
        given = [(d, i) for d, i in enumerate(n.args[1]) if i is not None]
        if len(given) == 1:
            idx = constant_value(gm, given[0][1])
            if idx is not None and idx.dtype is torch.bool:     # a constant mask on one axis: its positions
                idx = idx.nonzero().flatten() if idx.dim() == 1 else None
            return given[0][0], idx
    return None


def _leading(gm, n):
    """(flat index over the leading axes, number of those axes) of `x[i0, i1, ...]` with constant indices, or None."""
    if n.target is not _aten.index.Tensor:
        return None
    given = list(n.args[1])
    k = len(given)
    if k < 2 or any(i is None for i in given):
        return None
    idx = [constant_value(gm, i) for i in given]
    src = shape(n.args[0])
    if src is None or any(i is None or i.dtype.is_floating_point or i.dtype is torch.bool for i in idx):
        return None
    return flat_index(idx, src), k


def flat_index(idx: list[torch.Tensor], dims) -> torch.Tensor:
    """Integer index tensors on the leading len(idx) axes of a tensor of shape `dims`, broadcast together, as one
    1-D index into those axes flattened (negative indices wrapped)."""
    lead = torch.broadcast_tensors(*idx)
    flat = torch.zeros(lead[0].shape, dtype=torch.long)
    for i, size in zip(lead, dims[:len(idx)]):
        flat = flat * size + i.long() % size
    return flat.reshape(-1)


def _flattened_gather(graph, n, flat, k: int):
    src = shape(n.args[0])
    runs = runs_of(flat.tolist())
    if len(runs) > MAX_RUNS:
        return None
    with graph.inserting_before(n):
        x = graph.call_function(_aten.reshape.default, (n.args[0], [-1, *src[k:]]))
        return graph.call_function(_aten.reshape.default, (rows(graph, x, 0, runs), list(shape(n))))


def _table_and_ids(n, const):
    """(constant table, runtime ids) of a lookup on the table's first axis, or None."""
    if n.target is _aten.index.Tensor and len(n.args[1]) == 1:
        table, ids = n.args[0], n.args[1][0]
    elif n.target is _aten.index_select.default and n.args[1] == 0:
        table, ids = n.args[0], n.args[2]
    else:
        return None
    v = ids.meta.get("val") if isinstance(ids, torch.fx.Node) else None
    if table not in const or ids in const or not isinstance(v, torch.Tensor) or v.dtype.is_floating_point \
            or v.dtype is torch.bool or shape(table) is None or len(shape(table)) < 2:
        return None
    return table, ids


def _lookups(gm: torch.fx.GraphModule) -> int:
    from .constants import constant_nodes

    graph = gm.graph
    const = constant_nodes(graph)
    done = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or not n.users or shape(n) is None:
            continue
        found = _table_and_ids(n, const)
        if found is None:
            continue
        table, ids = found
        dims = shape(table)
        with graph.inserting_before(n):
            flat = graph.call_function(_aten.reshape.default, (table, [dims[0], -1]))
            rows = graph.call_function(_aten.embedding.default, (flat, ids))
            out = graph.call_function(_aten.reshape.default, (rows, list(shape(n))))
        n.replace_all_uses_with(out)
        done += 1
    return done


def _diagonal(gm, n, x, idx, r: int) -> bool:
    """`torch.gather(x, -1, idx)` where idx[..., i, j] depends on i - j only (relative positions: DeBERTa's c2p /
    p2c buckets), written without an [S, r, S] one-hot. y[i, m] = x[i, g(m)] for every distance m (one matmul
    with an [r, S_q + S_k - 1] one-hot: g's reversal is in the constant), then out[i, j] = y[i, j - i + S_q - 1]
    is read from y's rows laid end to end: element S_q - 1 + i * (D - 1) + j of the flat row (D = S_q + S_k - 1),
    so one slice, a reshape to [S_q, D - 1] and a slice of S_k columns. Bit-exact for finite x (the one-hot
    matmul adds exact zeros; the rest are copies). False (graph untouched) when idx is not of that form or the
    one-hot would still be over MAX_ELEMENTS."""
    from .constants import MAX_ELEMENTS

    dims = shape(x)
    sq, sk = idx.shape[-2], idx.shape[-1]
    rows = idx.reshape(-1, sq, sk)[0].long() % r
    span = sq + sk - 1
    if sq < 2 or r * span > MAX_ELEMENTS or not torch.equal(rows[1:, 1:], rows[:-1, :-1]):
        return False
    dist = [sq - 1 - m for m in range(span)]                                     # i - j for column m of y
    g = torch.tensor([int(rows[max(d, 0), max(-d, 0)]) for d in dist])
    name = f"_legal_diagonal_{n.name}"
    gm.register_buffer(name, torch.nn.functional.one_hot(g, r).to(torch.float32).t().contiguous()[None],
                       persistent=False)                                         # [1, r, D]
    f = math.prod(dims[:-2])
    call = n.graph.call_function
    with n.graph.inserting_before(n):
        xs = call(_aten.reshape.default, (x, [1, f * sq, r]))
        y = call(_aten.bmm.default, (xs, n.graph.get_attr(name)))               # [1, f * sq, D]
        y = call(_aten.reshape.default, (y, [f, sq * span]))
        y = call(_aten.slice.Tensor, (y, 1, sq - 1, sq - 1 + sq * (span - 1)))
        y = call(_aten.reshape.default, (y, [f, sq, span - 1]))
        y = call(_aten.slice.Tensor, (y, 2, 0, sk))
        y = call(_aten.reshape.default, (y, list(shape(n))))
    n.replace_all_uses_with(y)
    return True


def _onehot_gathers(gm: torch.fx.GraphModule) -> tuple[int, list[str]]:
    """`torch.gather(x, -1, idx)` with a constant idx (DeBERTa's relative-position gathers: idx depends on the
    query and key positions only) as a batched matmul with a constant one-hot right operand: the axes idx varies
    along are the matmul's batch, the others fold into its rows. Each output is x * 1 plus exact zeros: bit-exact
    for finite x. At most MAX_ELEMENTS one-hot entries; over that, an index that depends on the distance of its
    last two axes only is read off one diagonal one-hot (`_diagonal`), and any other stays a gather, named."""
    from .constants import MAX_ELEMENTS

    graph = gm.graph
    done, left = 0, []
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not _aten.gather.default or not n.users:
            continue
        x, dim, idx_node = n.args[:3]
        idx, dims = constant_value(gm, idx_node), shape(x)
        if idx is None or dims is None or dim % len(dims) != len(dims) - 1 or tuple(idx.shape[:-1]) != dims[:-1]:
            continue
        lead, r, k = dims[:-1], dims[-1], idx.shape[-1]
        varying = [a for a in range(len(lead)) if not torch.equal(idx, idx.narrow(a, 0, 1).expand_as(idx))]
        fixed = [a for a in range(len(lead)) if a not in varying]
        nv = math.prod(lead[a] for a in varying)
        if nv * r * k > MAX_ELEMENTS and varying == [len(lead) - 1] and _diagonal(gm, n, x, idx, r):
            done += 1
            continue
        if nv * r * k > MAX_ELEMENTS:
            left.append(f"gather with a one-hot of {nv * r * k} entries ({source_line(n) or 'no source'})")
            continue
        small = idx[tuple(slice(None) if a in varying else slice(0, 1) for a in range(len(lead)))]
        onehot = torch.nn.functional.one_hot(small.reshape(nv, k).long() % r, r).to(torch.float32)  # [nv, k, r]
        name = f"_legal_onehot_{n.name}"
        gm.register_buffer(name, onehot.transpose(1, 2).contiguous(), persistent=False)         # [nv, r, k]
        perm = varying + fixed + [len(lead)]
        call = graph.call_function
        with graph.inserting_before(n):
            xs = call(_aten.permute.default, (x, perm)) if perm != list(range(len(dims))) else x
            xs = call(_aten.reshape.default, (xs, [nv, math.prod(lead[a] for a in fixed), r]))
            y = call(_aten.bmm.default, (xs, graph.get_attr(name)))
            y = call(_aten.reshape.default, (y, [lead[a] for a in varying] + [lead[a] for a in fixed] + [k]))
            if perm != list(range(len(dims))):
                y = call(_aten.permute.default, (y, [perm.index(a) for a in range(len(dims))]))
        n.replace_all_uses_with(y)
        done += 1
    return done, left


_READS = {_aten.gather.default, _aten.index.Tensor, _aten.index_select.default, _aten.embedding.default}


def _uniform_reads(gm: torch.fx.GraphModule) -> int:
    """A gather or lookup, at runtime indices, of a constant whose entries are all one value (the all-zero
    token-type buffer HF encoders read at runtime position ids when no token types are passed) is that value at
    the result's shape: a constant. Bit-exact for indices in range."""
    graph = gm.graph
    done = 0
    for n in calls(graph, *_READS):
        table = constant_value(gm, n.args[0])
        if table is None or table.numel() == 0 or shape(n) is None or not bool((table == table.flatten()[0]).all()):
            continue
        name = f"_legal_uniform_{n.name}"
        gm.register_buffer(name, table.flatten()[0].expand(shape(n)).clone(), persistent=False)
        with graph.inserting_before(n):
            n.replace_all_uses_with(graph.get_attr(name))
        done += 1
    return done


def _row_picks(gm: torch.fx.GraphModule) -> int:
    """`x[arange(B), idx]` -- one position per batch row at a runtime index (CLIP's text pooling at the argmax
    token) -- as a one-hot product: onehot[b, s] = relu(1 - |idx[b] - s|), which is 1 at s = idx[b] and 0 elsewhere
    for integer idx, then [B, 1, S] @ [B, S, rest]. Bit-exact for finite x and idx in [0, S) (x * 1 plus exact
    zeros)."""
    graph = gm.graph
    done = 0
    for n in calls(graph, _aten.index.Tensor):
        x, given = n.args[0], list(n.args[1])
        dims, out = shape(x), shape(n)
        if len(given) != 2 or any(i is None for i in given) or dims is None or out is None or len(dims) < 2:
            continue
        batch_idx, idx = constant_value(gm, given[0]), given[1]
        b, s = dims[0], dims[1]
        if (batch_idx is None or constant_value(gm, idx) is not None or shape(idx) != (b,)
                or idx.meta["val"].is_floating_point()
                or not torch.equal(batch_idx.reshape(-1).long(), torch.arange(b))):
            continue
        call = graph.call_function
        with graph.inserting_before(n):
            onehot = float_one_hot(gm, idx, s)                                                   # [B, S]
            y = call(_aten.bmm.default, (call(_aten.reshape.default, (onehot, [b, 1, s])),
                                         call(_aten.reshape.default, (x, [b, s, -1]))))
            y = call(_aten.reshape.default, (y, list(out)))
        n.replace_all_uses_with(y)
        done += 1
    return done


def apply(gm: torch.fx.GraphModule) -> tuple[list[str], list[str]]:
    graph = gm.graph
    uniform = _uniform_reads(gm)
    picks = _row_picks(gm)
    lookups = _lookups(gm)
    onehots, left_onehot = _onehot_gathers(gm)
    done, left = 0, []
    for n in list(graph.nodes):
        if n.op != "call_function" or not n.users:
            continue
        lead = _leading(gm, n) if shape(n) is not None else None
        if lead is not None:
            out = _flattened_gather(graph, n, *lead)
            if out is None:
                left.append(f"gather of {len(lead[0])} scattered indices ({source_line(n) or 'no source'})")
            else:
                n.replace_all_uses_with(out)
                done += 1
            continue
        found = _axis_and_index(gm, n)
        if found is None:
            continue
        axis, idx = found
        src = shape(n.args[0])
        if idx is None or src is None or idx.dim() != 1 or idx.dtype.is_floating_point:
            continue
        axis = axis % len(src)
        runs = runs_of([int(i) % src[axis] for i in idx.tolist()])
        if len(runs) > MAX_RUNS:
            left.append(f"gather of {len(idx)} scattered indices ({source_line(n) or 'no source'})")
            continue
        with graph.inserting_before(n):
            out = rows(graph, n.args[0], axis, runs)
        n.replace_all_uses_with(out)
        done += 1
    left += left_onehot
    return ([f"gather with constant indices -> slices x{done} (bit-exact)"] * bool(done)
            + [f"gather along the last axis by constant indices -> one-hot batched matmul x{onehots} "
               "(bit-exact for finite values)"] * bool(onehots)
            + [f"constant table read at runtime ids -> embedding lookup x{lookups} (bit-exact)"] * bool(lookups)
            + [f"read of a constant holding one value -> that value x{uniform} (bit-exact for in-range ids)"]
            * bool(uniform)
            + [f"one runtime position per batch row -> one-hot product x{picks} (bit-exact for finite values)"]
            * bool(picks)), left
