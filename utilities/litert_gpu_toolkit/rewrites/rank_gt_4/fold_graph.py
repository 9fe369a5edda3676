"""Rank-5 activations from end to end: the exported graph carried at rank 4 (rewrite `fold_rank5`).

The wall: a video network (Conv3d / BatchNorm3d on [N, C, T, H, W]) has a rank-5 input, and every activation
after it is rank 5 too. The GPU takes rank <= 4 only ("Tensor dimensions must be less than 5"), and no handler
can help an op whose *input* is the graph's rank-5 input. `patch_conv_forms` already computes each conv3d at
rank 4; what is left is the input and the per-channel and elementwise ops between the convs.

The rewrite works on the exported (functional, ATen) graph: every rank-5 value [a, b, c, d, e] is carried as
the rank-4 [a, b, c, d * e] -- the same elements in the same order, so a rank-5 input is fed as the same bytes
with its last two axes merged. An op is carried over only when that is exact by construction:
  * reshapes / views: same element order, so the target shape is used as is (or folded when it is rank 5);
  * pointwise ops (torch's `pointwise` tag): every tensor operand broadcast to rank 5 must span both of the
    last two axes or neither; it is reshaped to its folded shape;
  * batch norm (inference): the channel axis stays axis 1;
  * mean / sum / amax / amin over dims that take both of the last two axes or neither; adaptive_avg_pool3d to
    (1, 1, 1), which is a mean over axes 2..4;
  * slice / select / cat on an axis before the last two; permute / transpose that keep the last two in place.
A value whose original is rank <= 4 but comes out folded differently is reshaped back to its original shape.
Anything else reading a folded value -- or a graph output of rank 5 -- leaves the graph as it was (the fold is
all or nothing), and so does a result that differs from the original graph's beyond fp32 summation order
(checked on the example inputs: every output within 1e-5 of its largest magnitude).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from ...core.inputs import folded_shape
from ..registry import Change, declare

NAME = "fold_rank5"
declare(NAME, wall="rank_gt_4")

_aten = torch.ops.aten
_RESHAPES = {_aten.view.default, _aten._unsafe_view.default, _aten.reshape.default, _aten.unsqueeze.default,
             _aten.squeeze.dim, _aten.squeeze.dims, _aten.flatten.using_ints}
_SAME = {_aten.clone.default, _aten.alias.default, _aten.detach.default, _aten._to_copy.default}
_REDUCTIONS = {_aten.mean.dim, _aten.sum.dim_IntList, _aten.amax.default, _aten.amin.default}
_BATCH_NORMS = {_aten._native_batch_norm_legit_no_training.default}


class NotFoldable(Exception):
    """The graph has an op the fold does not carry over; the message names it."""


@dataclass
class Folded:
    """What `fold_rank5` made: the rank-4 graph, its example inputs, and each folded input's shapes."""
    module: torch.fx.GraphModule
    args: tuple
    inputs: dict[int, tuple[tuple[int, ...], tuple[int, ...]]]     # positional index -> (rank-5 shape, fed shape)

    def describe(self) -> str:
        shapes = ", ".join(f"args_{i} {list(a)} -> {list(b)}" for i, (a, b) in self.inputs.items())
        return f"rank-5 inputs fed with their last two axes merged (the same bytes): {shapes}"


def _rank5(a) -> bool:
    return isinstance(a, torch.Tensor) and a.dim() == 5


def has_rank5_input(args) -> bool:
    return any(_rank5(a) for a in args)


def fold_rank5(module, args: tuple) -> Folded:
    """Export `module` on `args` (positional tensors), carry its rank-5 values at rank 4 (module docstring),
    check the result against `module`, return it. Raises NotFoldable when the graph cannot be carried."""
    args = tuple(args)
    if any(isinstance(a, torch.Tensor) and a.dim() > 5 for a in args):
        raise NotFoldable("an input of rank > 5")
    with torch.no_grad():
        gm = torch.export.export(module, args, strict=False).run_decompositions({}).module()
    _fold_graph(gm.graph)
    # a plain GraphModule: no input-shape check of the export's (the inputs are folded now), and eval() works
    gm = torch.fx.GraphModule(gm, gm.graph)
    fed = tuple(a.reshape(folded_shape(a.shape)) if _rank5(a) else a for a in args)
    with torch.no_grad():
        want, got = module(*args), gm(*fed)
    want, got = _leaves(want), _leaves(got)
    if len(want) != len(got):
        raise NotFoldable(f"{len(got)} outputs where the model returns {len(want)}")
    for w, g in zip(want, got):
        scale = float(w.abs().max()) if w.numel() else 0.0
        if w.shape != g.shape or (w.numel() and float((w - g).abs().max()) > 1e-5 * max(scale, 1e-30)):
            raise NotFoldable("the folded graph's outputs differ from the model's")
    inputs = {i: (tuple(a.shape), tuple(f.shape)) for i, (a, f) in enumerate(zip(args, fed)) if _rank5(a)}
    return Folded(gm, fed, inputs)


def _leaves(out) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _rank(node) -> int:
    v = _val(node)
    return v.dim() if isinstance(v, torch.Tensor) else -1


def _fold_graph(graph: torch.fx.Graph) -> None:
    folded: set[torch.fx.Node] = set()

    def reshape(before, value, shape):
        with graph.inserting_before(before):
            return graph.call_function(_aten.reshape.default, (value, [int(s) for s in shape]))

    for node in list(graph.nodes):
        if node.target is _aten.view.default:         # a view of a transposed value runs in export only
            node.target = _aten.reshape.default
        reads = [a for a in node.all_input_nodes if a in folded]
        if node.op == "placeholder":
            if _rank(node) == 5:
                folded.add(node)
            continue
        if node.op == "output":
            if any(_rank(a) == 5 for a in node.all_input_nodes):
                raise NotFoldable("a graph output of rank 5")
            continue
        if not reads and _rank(node) != 5:
            continue                                  # nothing of the fold's: unchanged
        if node.op == "call_module" and str(node.target).startswith("_guards") and not node.users:
            graph.erase_node(node)                    # export's check of the (rank-5) input shapes
            continue
        if node.op != "call_function":
            if reads:
                raise NotFoldable(f"{node.op} {node.target} reads a folded value")
            continue                                  # a rank-5 constant: its readers reshape it
        _carry(graph, node, folded, reshape)
        out = _val(node)
        if (isinstance(out, torch.Tensor) and out.dim() == 5) or node.target in _BATCH_NORMS:
            folded.add(node)
        elif isinstance(out, torch.Tensor) and reads:
            _restore(graph, node, out)


def _carry(graph, node, folded, reshape) -> None:
    """Rewrite `node` in place to compute the folded form of its value (module docstring)."""
    target, args = node.target, list(node.args)
    x = args[0] if args else None
    if target is operator.getitem:
        if x not in folded or getattr(x, "target", None) not in _BATCH_NORMS:
            raise NotFoldable(f"getitem {args[1]} of {x}")
        return                                        # [0] the folded output; [1], [2] per-channel statistics
    if target in _RESHAPES:                           # the same elements in the same order
        node.target, node.args, node.kwargs = _aten.reshape.default, (x, folded_shape(_val(node).shape)), {}
        return
    if target in _BATCH_NORMS or target in _SAME:
        if any(a in folded for a in node.all_input_nodes if a is not x):
            raise NotFoldable(f"{target} with a folded value after its first operand")
        return                                        # batch norm: axis 1 is still the channel axis
    if target is _aten.cat.default:
        dim = int(args[1]) % 5 if len(args) > 1 else 0
        if dim >= 3 or _rank(node) != 5:
            raise NotFoldable("cat on one of the last two axes")
        node.args = ([_operand(t, list(_val(node).shape), folded, node, reshape) for t in x], dim)
        return
    out = _val(node)
    if torch.Tag.pointwise in getattr(target, "tags", ()):
        o = list(out.shape)
        if len(o) != 5:
            raise NotFoldable(f"{target} with a rank-{len(o)} result")
        node.args = tuple(_operand(a, o, folded, node, reshape) for a in args)
        node.kwargs = {k: _operand(v, o, folded, node, reshape) for k, v in node.kwargs.items()}
        return
    if x not in folded or any(a in folded for a in node.all_input_nodes if a is not x):
        raise NotFoldable(f"{target} on a folded value")
    _carry_axes(node, target, args, x)


def _carry_axes(node, target, args, x) -> None:
    """An op of one folded operand that names axes (reductions, slices, transposes, permutes): its axes counted
    in the folded value (the last two axes, merged into one, may only be reduced or left in place together)."""
    if target in _REDUCTIONS or target is _aten.adaptive_avg_pool3d.default:
        if target is _aten.adaptive_avg_pool3d.default:
            if [int(s) for s in args[1]] != [1, 1, 1]:
                raise NotFoldable("adaptive_avg_pool3d to a size other than 1")
            node.target, args = _aten.mean.dim, [x, [2, 3, 4], True]
        if len(args) < 2 or not args[1]:
            raise NotFoldable(f"{target} over every axis")
        dims = sorted({int(d) % 5 for d in (args[1] if isinstance(args[1], (list, tuple)) else [args[1]])})
        if (3 in dims) != (4 in dims):
            raise NotFoldable(f"{target} over one of the last two axes")
        args[1] = [d for d in dims if d < 4]
        node.args = tuple(args)
        return
    if target in (_aten.slice.Tensor, _aten.select.int):
        dim = int(args[1] if len(args) > 1 else node.kwargs.get("dim", 0)) % 5
        if dim >= 3:
            raise NotFoldable(f"{target} on one of the last two axes")
        node.args, node.kwargs = (x, dim, *args[2:]), {k: v for k, v in node.kwargs.items() if k != "dim"}
        return
    if target is _aten.transpose.int:
        a, b = int(args[1]) % 5, int(args[2]) % 5
        if max(a, b) >= 3:
            raise NotFoldable("a transpose that moves the last two axes")
        node.args = (x, a, b)                         # counted from the front: a negative axis would shift
        return
    if target is _aten.permute.default:
        perm = [int(p) % 5 for p in args[1]]
        if perm[3:] != [3, 4]:
            raise NotFoldable("a permute that moves the last two axes")
        node.args = (x, perm[:3] + [3])
        return
    raise NotFoldable(f"{target} on a rank-5 value")


def _operand(a, out_shape, folded, node, reshape):
    """A pointwise op's operand in folded form: spans both of the last two axes or neither (else NotFoldable)."""
    if isinstance(a, (list, tuple)):
        if any(isinstance(v, torch.fx.Node) and _rank(v) > 0 for v in a):
            raise NotFoldable(f"{node.target} with a list of tensors")
        return a
    if not isinstance(a, torch.fx.Node) or _rank(a) < 0:
        return a
    shape = [int(s) for s in _val(a).shape]
    padded = [1] * (5 - len(shape)) + shape
    if padded[3:] not in ([1, 1], out_shape[3:]) and not (out_shape[3] == 1 or out_shape[4] == 1):
        raise NotFoldable(f"{node.target}: an operand broadcast along one of the last two axes")
    if a in folded and len(shape) == 5:
        return a
    if len(shape) == 0:
        return a
    return reshape(node, a, folded_shape(padded))


def _restore(graph, node, out) -> None:
    """`node`'s original value is rank <= 4; put it back in that shape after the folded computation."""
    users = list(node.users)
    with graph.inserting_after(node):
        back = graph.call_function(_aten.reshape.default, (node, [int(s) for s in out.shape]))
    for u in users:
        u.replace_input_with(node, back)


def fold_inputs(runnable, parsed: dict, changes: list, log: list, tried: set) -> tuple[object, dict]:
    """`convert_for_gpu`'s step: when its one signature has a rank-5 positional input (and no keyword
    inputs), (the folded module, {signature: (folded args, {})}), and the change appended to `changes`; else
    `runnable` and `parsed` as they were, with the reason logged when the fold was tried and refused (`tried` gets
    its name either way). The checker feeds the same arrays: `inputs.as_declared` merges the last two axes where
    the file declares them merged."""
    if len(parsed) != 1:
        return runnable, parsed
    (name, (args, kw)), = parsed.items()
    if kw or not has_rank5_input(args):
        return runnable, parsed
    from ...core.quiet import stage

    tried.add(NAME)                                   # whatever comes of it, it is no suggestion any more
    try:
        folded = fold_rank5(runnable, args)
    except Exception as e:                            # noqa: BLE001 - the graph stays as it was; the log says why
        log.append(f"{NAME}: not applied ({type(e).__name__}: {e})"[:300])
        stage(log[-1])
        return runnable, parsed
    changes.append(Change("", folded.describe(), NAME, True))
    stage(f"{NAME}: {folded.describe()}")
    return folded.module, {name: (folded.args, {})}
