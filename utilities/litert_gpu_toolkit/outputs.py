"""The converted file's output names for a model's torch output, and a wrapper for outputs the converter cannot take.

litert-torch names a converted output from the pytree structure of what forward returns: `output_0, ...` for a
tensor, a tuple or a nested tuple, the keys for a dict (`y`, `z`), prefixed keys for nested dicts. The GPU check
compares outputs by name, so the torch reference must carry the same names: `output_names` computes them with
litert-torch's own naming function. A return value that is not a pytree of tensors (a plain dataclass, a
custom class) cannot be exported; `FlatOutputs` returns its tensors as a flat tuple instead (names
`output_0, ...`, in the order `convert_result.np_tree` lists them). Exact: the same tensors, regrouped.
"""
from __future__ import annotations

import torch


def _all_tensor_leaves(value) -> bool:
    from torch.utils import _pytree as pytree

    leaves, _ = pytree.tree_flatten(value)
    return bool(leaves) and all(isinstance(leaf, torch.Tensor) for leaf in leaves)


def output_names(value, count: int) -> tuple[list[str], bool]:
    """(names of the converted outputs, whether the model needs `FlatOutputs`) for one torch output."""
    default = [f"output_{i}" for i in range(count)]
    if not _all_tensor_leaves(value):
        return default, True
    from torch.utils import _pytree as pytree

    _, spec = pytree.tree_flatten(value)
    if not spec.context:
        return default, False
    try:
        from litert_torch.backend.export_utils import flat_dict_names, get_children
        names = [str(n) for n in flat_dict_names(get_children(spec), spec.context)]
    except Exception:                                      # noqa: BLE001 - another litert-torch: the default names
        return default, False
    return (names, False) if len(names) == count and len(set(names)) == count else (default, True)


class FlatOutputs(torch.nn.Module):
    """`model` with its output returned as a flat tuple of tensors (see the module docstring)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    @property
    def changes(self):
        return getattr(self.model, "changes", [])

    def forward(self, *args, **kwargs):
        return tuple(_tensors(self.model(*args, **kwargs)))


def _tensors(value) -> list:
    import dataclasses

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in _tensors(getattr(value, f.name))]
    return []
