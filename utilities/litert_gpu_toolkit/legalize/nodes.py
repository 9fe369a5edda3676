"""What the rules read off a graph node: its shape and the user's source line that made it."""
from __future__ import annotations

import re

import torch


def source_line(node: torch.fx.Node) -> str:
    """`file.py:LINE` of the user code that made `node` (the last frame of its stack trace), or ''."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    path, line = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}"


def calls(graph: torch.fx.Graph, *targets) -> list[torch.fx.Node]:
    """The graph's calls of any of `targets` that something reads, in order (a list: rules edit the graph)."""
    return [n for n in graph.nodes if n.op == "call_function" and n.target in targets and n.users]


def shape(node) -> tuple[int, ...] | None:
    """The shape of the value `node` makes; None when unknown -- not a tensor, or a size export could not know
    (a bool-mask index's result, until the driver reads the shapes again on the example inputs)."""
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return None
    try:
        return tuple(int(s) for s in v.shape)
    except Exception:                                   # noqa: BLE001 - torch's data-dependent-size errors
        return None


def dtype(node):
    """The dtype of the value a graph node makes (its `val` metadata); None when unknown or not a node."""
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v.dtype if isinstance(v, torch.Tensor) else None


def attr_value(gm: torch.fx.GraphModule, target: str):
    """The parameter, buffer or constant a get_attr node names (a dotted path from the graph module)."""
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def negated_twice(graph: torch.fx.Graph, value: torch.fx.Node, before: torch.fx.Node) -> torch.fx.Node:
    """-(-value), inserted before `before`, carrying value's metadata: the same numbers (negation is exact) in a
    tensor of its own, which a converter's fusion or output dedup leaves alone."""
    with graph.inserting_before(before):
        neg = graph.call_function(torch.ops.aten.neg.default, (value,))
        again = graph.call_function(torch.ops.aten.neg.default, (neg,))
    for key in ("val", "tensor_meta", "stack_trace"):
        if key in value.meta:
            neg.meta[key] = again.meta[key] = value.meta[key]
    return again
