"""Where bisect taps a model: every block in execution order (`auto_boundaries`), and the tap itself (`_Tap`)."""
from __future__ import annotations

from typing import Sequence

from .report import DEFAULT_MAX_BOUNDARIES


def _has_children(module) -> bool:
    return next(iter(module.children()), None) is not None


def _torch_layer(module) -> bool:
    """A leaf layer torch itself defines (Linear, GELU, ...), as opposed to a model's own module."""
    return not _has_children(module) and type(module).__module__.startswith("torch.")


def _blocks(model) -> list[str]:
    """Non-leaf members of every ModuleList / Sequential, not descending into a block. A container holding no
    torch leaf layer is a list of blocks: its members with a forward of their own count even without children
    (a parameter-free attention step between two layers)."""
    import torch.nn as nn

    found: list[str] = []

    def visit(module, prefix: str) -> None:
        container = isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) >= 2
        of_blocks = container and not any(_torch_layer(c) for c in module.children())
        for name, child in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            if container and (_has_children(child) or of_blocks):
                found.append(path)
            elif _has_children(child):
                visit(child, path)

    visit(model, "")
    return found


def _flat_children(model) -> list[str]:
    """The children of the first module below the root that has more than one (through single-child wrappers such
    as GpuRewriteWrapper): a flat graph -- a torch.fx GraphModule, an onnx2torch import -- is tapped at its layers."""
    prefix, module = "", model
    while True:
        kids = list(module.named_children())
        if len(kids) != 1:
            return [f"{prefix}.{n}" if prefix else n for n, _ in kids]
        prefix, module = (f"{prefix}.{kids[0][0]}" if prefix else kids[0][0]), kids[0][1]


def execution_order(model, example_inputs: Sequence, forward=None) -> tuple[dict[str, int], object]:
    """Module path -> rank at which its forward first returned, and the model's output, from one torch run."""
    import torch

    order: dict[str, int] = {}
    handles = []

    def seen(name: str):
        def hook(_m, _i, _o) -> None:          # returns None: the output is left as it is
            order.setdefault(name, len(order))
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(seen(name)))
    try:
        with torch.no_grad():
            out = (forward or model)(*example_inputs)
    finally:
        for h in handles:
            h.remove()
    return order, out


def auto_boundaries(model, example_inputs: Sequence | None = None, max_boundaries: int = DEFAULT_MAX_BOUNDARIES,
                    forward=None, traced: tuple | None = None) -> list[str]:
    """Every block in execution order (see the module docstring), after what feeds the first one (`_stem`),
    then "" for the model's output when the last block's output is not already it. Without example inputs:
    definition order, no stem or output entry.
    traced: `execution_order(...)` already computed for these inputs (saves a forward pass)."""
    import torch.nn as nn

    names = _blocks(model)
    if not names:                           # containers of leaf layers: their layers, else the root's children
        best, best_n = None, 1
        for name, module in model.named_modules():
            if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) > best_n:
                best, best_n = name, len(module)
        names = ([f"{best}.{i}" if best else str(i) for i in range(best_n)] if best is not None
                 else _flat_children(model))
    if example_inputs is not None:
        order, out = traced or execution_order(model, example_inputs, forward)
        names = sorted(_ran(model, names, order), key=order.__getitem__)
        stem = _stem(model, names[0], order) if names else None
        if stem is not None:
            names.insert(0, stem)
        if not names or not _is_output(model, names[-1], out, example_inputs, forward):
            names.append("")                # a model without blocks is one boundary: its output
    if len(names) > max_boundaries > 1:       # spread evenly, always keeping the last
        keep = sorted({round(i * (len(names) - 1) / (max_boundaries - 1)) for i in range(max_boundaries)})
        names = [names[i] for i in keep]
    return names


def _ran(model, names: list[str], order: dict[str, int]) -> list[str]:
    """The names whose forward ran; a ModuleList never runs itself (the model loops over it), so one that is a
    block -- Funnel's encoder keeps a ModuleList of layers per block -- stands for its members that ran."""
    import torch.nn as nn

    kept: list[str] = []
    for name in names:
        module = model.get_submodule(name)
        if name in order:
            kept.append(name)
        elif isinstance(module, nn.ModuleList):
            kept += _ran(model, [f"{name}.{k}" for k, _ in module.named_children()], order)
    return kept


def _stem(model, first: str, order: dict[str, int]) -> str | None:
    """The module that returned last before the first block did, among the children of the first block's
    ancestors (an embedding layer, a patch embedding, a CNN's stem): a tap there tells a fault in what feeds the
    blocks from one in the first block (MobileBERT's trigram embedding was blamed on its first layer)."""
    parts, best = first.split("."), None
    for k in range(len(parts)):
        prefix = ".".join(parts[:k])
        module = model.get_submodule(prefix) if prefix else model
        for name, _ in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            if path != ".".join(parts[:k + 1]) and order.get(path, len(order)) < order[first] \
                    and (best is None or order[path] > order[best]):
                best = path
    return best


def _is_output(model, name: str, out, example_inputs, forward) -> bool:
    """Whether the first tensor of the model's output is the tensor module `name` returned."""
    from ..core.outputs import flat_tensors

    final = flat_tensors(out)
    if not final:
        return True
    tap = _Tap(model, name, forward)
    import torch

    with torch.no_grad():
        got = tap(*example_inputs)
    return tuple(got.shape) == tuple(final[0].shape) and bool(torch.equal(got, final[0]))


def _children_in_order(model, block: str, order: dict[str, int]) -> list[str]:
    """The members of `block` worth tapping, in execution order: its children (descending through a
    single-child wrapper), then the block itself."""
    module = model.get_submodule(block)
    prefix = block
    while True:
        kids = [(n, m) for n, m in module.named_children()]
        if len(kids) != 1 or not _has_children(kids[0][1]):
            break
        prefix, module = f"{prefix}.{kids[0][0]}", kids[0][1]
    names = [f"{prefix}.{n}" for n, _ in kids if f"{prefix}.{n}" in order]
    return sorted(names, key=order.__getitem__)


class _Tap:
    """Wraps a model so its forward returns the first tensor module `boundary` returns ("" = the output).

    forward: the module to call (default `model`), e.g. a GpuRewriteWrapper around it, so the rewrites
    apply while the tap is traced."""

    def __new__(cls, model, boundary: str, forward=None):
        import torch

        from ..core.outputs import flat_tensors

        class Tap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = forward if forward is not None else model
                self.target = model.get_submodule(boundary) if boundary else None

            def forward(self, *args):
                if self.target is None:
                    return flat_tensors(self.model(*args))[0]
                captured = []

                def hook(_mod, _inp, out):
                    tensors = flat_tensors(out)
                    if tensors:
                        captured.append(tensors[0])

                handle = self.target.register_forward_hook(hook)
                try:
                    self.model(*args)
                finally:
                    handle.remove()
                if not captured:
                    raise ValueError(f"module {boundary!r} returned no tensor")
                return captured[0]

        return Tap()
