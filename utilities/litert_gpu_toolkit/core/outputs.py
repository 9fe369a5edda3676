"""The converted file's input and output names for a model's torch inputs and output, and a wrapper for outputs
the converter cannot take.

Inputs: litert-torch flattens (args, kwargs) as a pytree: `args_0, args_1, ...`, `args_0_0, args_0_1` for a list
given as one positional input, the keyword names for keywords; `input_names` names the example's tensors so.

litert-torch names a converted output from the pytree structure of what forward returns: `output_0, ...` for a
tensor, a tuple or a nested tuple, the keys for a dict (`y`, `z`), prefixed keys for nested dicts. The GPU check
compares outputs by name, so the torch reference must carry the same names: `output_names` computes them with
litert-torch's own naming function. A return value that is not a pytree of tensors (a plain dataclass, a
custom class, a value that is not a tensor), or a dict with a key that is not a string (`{0: y, 1: z}`), cannot
be exported as it is; `FlatOutputs` returns its tensors as a flat tuple instead (names `output_0, ...`, in the
order `flat_tensors` lists them: a dict's values in its insertion order, depth first). Exact: the same
tensors, regrouped.
"""
from __future__ import annotations

import torch


def _all_tensor_leaves(value) -> bool:
    from torch.utils import _pytree as pytree

    leaves, _ = pytree.tree_flatten(value)
    return bool(leaves) and all(isinstance(leaf, torch.Tensor) for leaf in leaves)


def _str_keys_only(value) -> bool:
    """Are all dict keys in the (nested) output strings? litert-torch names outputs by the keys and refuses
    others (an int or tuple key fails the conversion in set_signature)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) for k in value) and all(_str_keys_only(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_str_keys_only(v) for v in value)
    return True


def output_names(value, count: int) -> tuple[list[str], bool]:
    """(names of the converted outputs, whether the model needs `FlatOutputs`) for one torch output."""
    default = [f"output_{i}" for i in range(count)]
    if not _all_tensor_leaves(value) or not _str_keys_only(value):
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


def input_names(args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]] | None:
    """[(converted input name, tensor)] for the example inputs, or None when they cannot be named this way."""
    from torch.utils import _pytree as pytree

    try:
        from litert_torch.backend.export_utils import flat_dict_names, get_children

        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        args_spec, kwargs_spec = get_children(spec)
        names = [f"args_{n}" for n in flat_dict_names(get_children(args_spec), args_spec.context)]
        names += [str(n) for n in flat_dict_names(get_children(kwargs_spec), kwargs_spec.context)]
    except Exception:                                      # noqa: BLE001 - another litert-torch: the caller's names
        return None
    if len(names) != len(leaves):
        return None
    return [(n, leaf) for n, leaf in zip(names, leaves) if isinstance(leaf, torch.Tensor)]


class FlatOutputs(torch.nn.Module):
    """`model` with its output returned as a flat tuple of tensors (see the module docstring)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    @property
    def changes(self):
        return getattr(self.model, "changes", [])

    def forward(self, *args, **kwargs):
        return tuple(flat_tensors(self.model(*args, **kwargs)))


def non_tensor_outputs(value, where: str = "output") -> list[str]:
    """Where a (nested) output holds something that is not a tensor, with what it is (`output[1]: int 3`,
    `output['n']: str 'a'`): a .tflite returns tensors only, so these are not in the converted file. None is
    no value and is not listed."""
    import dataclasses

    if isinstance(value, torch.Tensor) or value is None:
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_tensor_outputs(v, f"{where}[{k!r}]")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in non_tensor_outputs(v, f"{where}[{i}]")]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [p for f in dataclasses.fields(value)
                for p in non_tensor_outputs(getattr(value, f.name), f"{where}.{f.name}")]
    text = repr(value)
    return [f"{where}: {type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"]


def flat_tensors(value) -> list:
    """The tensors of a (nested) output -- dicts, lists, tuples, dataclasses -- in the order the converter
    flattens them; `convert_result.np_tree` lists the reference in this same order."""
    import dataclasses

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flat_tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flat_tensors(v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in flat_tensors(getattr(value, f.name))]
    return []
