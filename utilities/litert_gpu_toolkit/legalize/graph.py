"""The pass driver: export, run the rules, check against the module, report.

Every rule is exact by construction (a copy, a fold computed by torch on the same numbers, a reshape of the same
elements); the driver still compares the legalized graph with the module on the example inputs and refuses the
result when any output differs by more than fp32 summation order (1e-5 of the output's largest magnitude).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import (asserts, boolean, broadcast, constant_operand, constants, cumsum, degenerate, einsum, fft, float64,
               floor_div, gather, group_norm, large_weight, masked_assign, matmul, one_hot, pool, rank, returned_fc,
               same_output, topk, unfold, volume)
from .nodes import shape, source_line

# the rules, in order: asserts (runtime checks, which the converter cannot lower), topk (its index of one element is
# a constant for the next rules), fft (no other rule reads a complex value), constants (a folded value needs no
# other rule), float64 (LiteRT has no float64 kernels), floor_div, one_hot and cumsum (runtime ones as float
# arithmetic and a matmul), einsum (its matmul form is ops the rank rule knows), volume (3-D convs and pools as 2-D
# ones, their rank-5 views left to the next rule), unfold (windows as a one-hot conv), group_norm (written out: its
# rank-5 form is then elementwise ops the rank rule knows), then rank (the later rules see rank <= 4 ops), then the
# runtime forms (bool masks before broadcasts: the mask's float form may add expands), last the operand order and
# layout of what the others made. Shapes are read again after each rule (new nodes carry none).
RULES = (asserts, topk, fft, constants, float64, floor_div, one_hot, cumsum, einsum, volume, unfold, group_norm,
         rank, pool, degenerate, gather, masked_assign, boolean, broadcast, matmul, constant_operand, large_weight,
         returned_fc, same_output)
TOLERANCE = 1e-5                 # relative to each output's largest magnitude: fp32 summation order


class NotLegal(Exception):
    """The legalized graph could not be made or does not match the module; the message says why."""


@dataclass
class Legalized:
    module: torch.fx.GraphModule            # call it as the original module is called (same args and kwargs)
    done: list[str] = field(default_factory=list)    # one line per change, e.g. "expand -> 2 concatenations (...)"
    left: list[str] = field(default_factory=list)    # wall ops left as they were, with op and source line

    @property
    def changed(self) -> bool:
        return bool(self.done)

    def describe(self) -> str:
        return "; ".join(self.done) or "nothing to change"


def _drop_orphan_asserts(graph: torch.fx.Graph) -> bool:
    """Export's metadata asserts on a value nothing else reads any more (a rule replaced its uses): they would
    keep the replaced value -- a bool mask, say -- alive in the graph. Returns whether any was dropped."""
    dropped = False
    assert_ = torch.ops.aten._assert_tensor_metadata.default
    for n in list(graph.nodes):
        if (n.op == "call_function" and n.target is assert_ and isinstance(n.args[0], torch.fx.Node)
                and n.args[0].op != "placeholder"
                and all(u.op == "call_function" and u.target is assert_ for u in n.args[0].users)):
            graph.erase_node(n)           # every reader is an assert (Gemma 3n's audio: a `.to()` asserts twice)
            dropped = True
    return dropped


def export_graph(module, args: tuple, kwargs: dict) -> torch.fx.GraphModule:
    """torch.export's ATen graph of `module`, parameters and buffers as attributes (get_attr nodes)."""
    with torch.no_grad():
        return torch.export.export(module, tuple(args), dict(kwargs or {}), strict=False).run_decompositions(
            {}).module()


def legalize(module, args: tuple, kwargs: dict | None = None) -> Legalized:
    """The module's exported graph with every rule applied and checked (module docstring). Raises NotLegal."""
    import warnings

    kwargs = dict(kwargs or {})
    try:
        with warnings.catch_warnings():       # torch's own deprecation notes while exporting: not the user's concern
            warnings.simplefilter("ignore", FutureWarning)
            gm = export_graph(module, args, kwargs)
    except Exception as e:                            # noqa: BLE001 - the caller converts the module as it is
        raise NotLegal(f"torch.export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    out = Legalized(gm)
    try:
        for rule in RULES:
            done, left = rule.apply(gm)
            out.done += done
            out.left += left
            if done:
                _views_as_reshapes(gm.graph)
                _read_shapes(gm, args, kwargs)
    except Exception as e:                            # noqa: BLE001 - a rule's bug must not break the conversion
        raise NotLegal(f"{type(e).__name__} in rule {rule.__name__.rsplit('.', 1)[-1]}: "
                       f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
    while _drop_orphan_asserts(gm.graph) | gm.graph.eliminate_dead_code():
        pass                                          # a dropped value frees its inputs' asserts in turn
    gm.graph.lint()
    gm.recompile()
    out.left += audit(gm.graph)
    if out.changed:
        _check(module, gm, args, kwargs)
    return out


_REFUSED = {torch.ops.aten.expand.default: "BROADCAST_TO", torch.ops.aten.index.Tensor: "GATHER_ND",
            torch.ops.aten.gather.default: "GATHER_ND", torch.ops.aten.cumsum.default: "CUMSUM"}


def audit(graph: torch.fx.Graph) -> list[str]:
    """What is still outside the GPU's contract after the rules: ops it refuses, values of rank > 4."""
    left = []
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        dims = shape(n)
        if n.target in _REFUSED:
            left.append(f"{_REFUSED[n.target]} from {n.target} ({source_line(n) or 'no source'})")
        elif dims is not None and len(dims) > 4:
            what = "output" if {u.op for u in n.users} == {"output"} else "value"
            left.append(f"rank {len(dims)} {what} from {n.target} ({source_line(n) or 'no source'})")
    return left


def _views_as_reshapes(graph: torch.fx.Graph) -> None:
    """Every view a reshape: a rule may hand a view a transposed (non-contiguous) tensor, which torch's view
    refuses and reshape copies; the converter makes a RESHAPE of either."""
    for n in graph.nodes:
        if n.op == "call_function" and n.target in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default):
            n.target = torch.ops.aten.reshape.default


def _read_shapes(gm: torch.fx.GraphModule, args, kwargs) -> None:
    """Every node's `meta["val"]` from a run on the example inputs (as a meta-device tensor: shape and dtype)."""
    import torch.fx._pytree as fx_pytree

    gm.graph.lint()
    gm.recompile()
    flat = fx_pytree.tree_flatten_spec((tuple(args), dict(kwargs)), gm._in_spec)

    class _Shapes(torch.fx.Interpreter):
        def run_node(self, n):
            v = super().run_node(n)
            if isinstance(v, torch.Tensor):
                n.meta["val"] = torch.empty(v.shape, dtype=v.dtype, device="meta")
            elif isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
                n.meta["val"] = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in v]
            return v

    with torch.no_grad():
        _Shapes(gm).run(*flat)


def _leaves(out) -> list:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _check(module, gm, args, kwargs) -> None:
    with torch.no_grad():
        want, got = _leaves(module(*args, **kwargs)), _leaves(gm(*args, **kwargs))
    if len(want) != len(got):
        raise NotLegal(f"the legalized graph returns {len(got)} tensors where the module returns {len(want)}")
    for i, (w, g) in enumerate(zip(want, got)):
        if w.shape != g.shape or w.dtype != g.dtype:
            raise NotLegal(f"output {i}: {tuple(g.shape)} {g.dtype} where the module gives {tuple(w.shape)} {w.dtype}")
        if w.numel() and w.is_floating_point():
            scale = float(w.abs().max())
            gap = float((w.float() - g.float()).abs().max())
            if not gap <= TOLERANCE * max(scale, 1e-30):
                raise NotLegal(f"output {i} differs from the module's by {gap:.3g} (largest |value| {scale:.3g})")
        elif w.numel() and not torch.equal(w, g):
            raise NotLegal(f"output {i} differs from the module's")
